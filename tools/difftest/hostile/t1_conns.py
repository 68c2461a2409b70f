# idle connections, half headers, slow loris headers/body, connection limit
import socket, time, sys, threading
from common import *
s = Svc("/tmp/fencewatch-hostile/d1", ["--header-read-timeout", "3s", "--idle-timeout", "5s"])
print("start", s.rss())
socks = []
t0 = time.time()
for i in range(3000):
    try:
        c = socket.create_connection(("127.0.0.1", s.port), timeout=5)
        if i % 3 == 1:
            c.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n")   # half a header
        elif i % 3 == 2:
            c.sendall(b"POST /v1/events HTTP/1.1\r\nHost: x\r\ncontent-type: application/x-ndjson\r\ncontent-length: 16000000\r\n\r\n{")  # slow body
        socks.append(c)
    except Exception as e:
        print("connect fail at", i, e); break
print("opened", len(socks), "in", round(time.time()-t0,2), "s", s.rss())
t1=time.time(); st = s.status("GET", "/livez"); print("livez while flooded:", st, round(time.time()-t1,3), "s")
m,_ = s.metrics("fencewatch_http_connections", "fencewatch_ingest_pending_bytes", "fencewatch_checkpoint_offset")
print(m)
# small ingest while flooded
body = ('{"kind":"heartbeat","ts":%d,"route":"r"}\n' % now_ns()).encode()
print("post while flooded:", s.post(body)[0])
time.sleep(7)
alive = 0
for c in socks:
    try:
        c.settimeout(0.01)
        d = c.recv(100)
        if d == b"": pass
        else: alive += 0
    except socket.timeout:
        alive += 1
    except Exception:
        pass
print("after 7s, still open (no EOF):", alive, s.rss())
m,_ = s.metrics("fencewatch_http_connections", "fencewatch_ingest_pending_bytes")
print(m)
for c in socks: c.close()
# slow loris: one byte every 0.5 s of headers, 10 sockets
def loris(res, i):
    c = socket.create_connection(("127.0.0.1", s.port), timeout=20)
    hdr = b"GET /livez HTTP/1.1\r\nHost: x\r\nX-a: " + b"a"*100
    t=time.time()
    try:
        for b in hdr:
            c.sendall(bytes([b])); time.sleep(0.2)
            if time.time()-t > 8: break
        res[i] = ("sent all", time.time()-t)
    except Exception as e:
        res[i] = ("closed after", round(time.time()-t,2), type(e).__name__)
res = {}
th = [threading.Thread(target=loris, args=(res, i)) for i in range(10)]
[x.start() for x in th]; [x.join() for x in th]
print("slow loris headers:", res)
# slow body: header ok, body 1 byte / 0.5s  -> request_timeout (30s default) or idle?
def slowbody(res, i):
    c = socket.create_connection(("127.0.0.1", s.port), timeout=40)
    c.sendall(b"POST /v1/events HTTP/1.1\r\nHost: x\r\ncontent-type: application/x-ndjson\r\ncontent-length: 1000\r\n\r\n")
    t=time.time()
    try:
        while time.time()-t < 40:
            c.sendall(b" "); time.sleep(0.5)
            c.settimeout(0.01)
            try:
                d=c.recv(1000)
                res[i]=("answer after", round(time.time()-t,1), d[:60]); return
            except socket.timeout: pass
        res[i]=("no answer in 40s",)
    except Exception as e:
        res[i]=("closed after", round(time.time()-t,1), type(e).__name__)
res={}
th=[threading.Thread(target=slowbody,args=(res,0))]; [x.start() for x in th]; [x.join() for x in th]
print("slow body:", res)
m,_ = s.metrics("fencewatch_http_connections_closed_total", "fencewatch_checkpoint_offset", "fencewatch_wal_next_offset")
print(m, s.rss())
print("exit", s.term())
