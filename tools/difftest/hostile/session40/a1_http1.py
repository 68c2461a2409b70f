# tokenless HTTP/1.1 oddities
import sys, threading; import os; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h import *
s = Svc('/tmp/h40/d1')
def rawsend(data, read=True, timeout=10, rd_limit=1<<20):
    c = socket.create_connection(("127.0.0.1", s.port), timeout=timeout)
    t = time.time()
    try: c.sendall(data)
    except Exception as e: return f"sendEXC {e}", time.time()-t
    out = b""
    if read:
        try:
            while len(out) < rd_limit:
                d = c.recv(65536)
                if not d: break
                out += d
        except socket.timeout: out += b"<timeout>"
        except Exception as e: out += f"<{e}>".encode()
    c.close(); return out, round(time.time()-t,2)
def show(name, r):
    out, dt = r
    first = out[:100] if isinstance(out, bytes) else out
    print(f"{name}: {first!r} len={len(out)} t={dt} rss={s.rss()}", flush=True)
show("unauth POST events big CL no body", rawsend(b"POST /v1/events HTTP/1.1\r\nHost: x\r\ncontent-type: application/x-ndjson\r\ncontent-length: 16000000\r\n\r\n", timeout=40))
show("unauth expect 100-continue", rawsend(b"POST /v1/events HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\ncontent-type: application/x-ndjson\r\ncontent-length: 16000000\r\n\r\n", timeout=40))
show("auth expect 100-continue never send", rawsend(b"POST /v1/events HTTP/1.1\r\nHost: x\r\nauthorization: Bearer s3cret-token\r\nExpect: 100-continue\r\ncontent-type: application/x-ndjson\r\ncontent-length: 1000\r\n\r\n", timeout=40))
show("chunk-size line 1MB of zeros", rawsend(b"POST /v1/events HTTP/1.1\r\nHost: x\r\nauthorization: Bearer s3cret-token\r\ntransfer-encoding: chunked\r\ncontent-type: application/x-ndjson\r\n\r\n" + b"0"*(1<<20) + b"1\r\nx\r\n0\r\n\r\n"))
show("chunk ext 8MB", rawsend(b"POST /v1/events HTTP/1.1\r\nHost: x\r\nauthorization: Bearer s3cret-token\r\ntransfer-encoding: chunked\r\ncontent-type: application/x-ndjson\r\n\r\n1;" + b"a"*(8<<20) + b"\r\nx\r\n0\r\n\r\n"))
show("chunk size ffffffffffffffff", rawsend(b"POST /v1/events HTTP/1.1\r\nHost: x\r\nauthorization: Bearer s3cret-token\r\ntransfer-encoding: chunked\r\ncontent-type: application/x-ndjson\r\n\r\nffffffffffffffff\r\nx\r\n0\r\n\r\n", timeout=15))
show("1M 1-byte chunks", rawsend(b"POST /v1/events HTTP/1.1\r\nHost: x\r\nauthorization: Bearer s3cret-token\r\ntransfer-encoding: chunked\r\ncontent-type: application/x-ndjson\r\n\r\n" + b"1\r\n\n\r\n"*(1<<20) + b"0\r\n\r\n", timeout=30))
show("trailer flood 1MB", rawsend(b"POST /v1/events HTTP/1.1\r\nHost: x\r\nauthorization: Bearer s3cret-token\r\ntransfer-encoding: chunked\r\ncontent-type: application/x-ndjson\r\n\r\n1\r\n\n\r\n0\r\n" + b"x-t: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n"*15000 + b"\r\n", timeout=15))
show("CL + TE both", rawsend(b"POST /v1/events HTTP/1.1\r\nHost: x\r\nauthorization: Bearer s3cret-token\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\ncontent-type: application/x-ndjson\r\n\r\n0\r\n\r\n", timeout=10))
show("two CL", rawsend(b"POST /v1/events HTTP/1.1\r\nHost: x\r\nauthorization: Bearer s3cret-token\r\ncontent-length: 1\r\ncontent-length: 2\r\ncontent-type: application/x-ndjson\r\n\r\n\n\n", timeout=10))
show("header 1MB value", rawsend(b"GET /livez HTTP/1.1\r\nHost: x\r\nx-a: " + b"a"*(1<<20) + b"\r\n\r\n"))
show("100k headers", rawsend(b"GET /livez HTTP/1.1\r\nHost: x\r\n" + b"x-a: b\r\n"*100000 + b"\r\n"))
# pipelining without reading: 50k pipelined GET /metrics and never read
c = socket.create_connection(("127.0.0.1", s.port)); c.setblocking(False)
req = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"; sent = 0; t0=time.time()
buf = req * 20000
while time.time()-t0 < 10 and sent < len(buf):
    try: sent += c.send(buf[sent:])
    except BlockingIOError: time.sleep(0.05)
print("pipelined /metrics unread: sent", sent//len(req), "reqs", s.rss(), s.probe(), flush=True)
time.sleep(3); print("after 3s", s.rss(), flush=True); c.close()
# pipelined GET / (page), tokenless
c = socket.create_connection(("127.0.0.1", s.port)); c.setblocking(False)
req = b"GET /?x=" + b"%25"*3000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"; sent=0; t0=time.time(); buf=req*5000
while time.time()-t0 < 10 and sent < len(buf):
    try: sent += c.send(buf[sent:])
    except BlockingIOError: time.sleep(0.05)
print("pipelined GET / unread: sent", sent//len(req), s.rss(), s.probe(), flush=True); c.close()
for q in ["/?property=%FF%FE", "/?" + "a=1&"*20000, "/?at=99999999999999999999999", "/?property=../../etc/passwd", "/..%2f..%2fetc/passwd", "/static/../../etc/passwd", "/openapi.json", "/v1/../metrics", "//livez", "/v1/scopes/..%2F..%2F..%2Fetc%2Fpasswd", "/v1/counterexamples/..%2F..%2Fetc%2Fpasswd"]:
    try: st, b, h = s.req("GET", q, timeout=10); print("GET", q[:60], st, len(b), b[:120], flush=True)
    except Exception as e: print("GET", q[:60], "EXC", e)
    try: st, b, h = s.req("GET", q, timeout=10, auth=False); print("  noauth", st, len(b), b[:80], flush=True)
    except Exception as e: print("  noauth EXC", e)
print("final", s.rss(), s.probe())
print(s.log()[-2000:])
print("exit", s.term())
