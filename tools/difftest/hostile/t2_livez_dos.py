# An attacker with no token holds every connection slot (1024 by default) with request bodies in flight,
# re-opening each as it closes; does /livez answer over 70 s?
import socket, time, threading, selectors
from common import *
s = Svc("/tmp/fencewatch-hostile/d2")   # defaults: max_connections 1024, request_timeout 30s, header_read_timeout 10s
HDR = b"POST /v1/events HTTP/1.1\r\nHost: x\r\ncontent-type: application/x-ndjson\r\ncontent-length: 1000\r\n\r\n{"
N = 1100
stop = time.time() + 70
socks = {}
sel = selectors.DefaultSelector()
def opener():
    while time.time() < stop:
        while len(socks) < N and time.time() < stop:
            try:
                c = socket.create_connection(("127.0.0.1", s.port), timeout=2)
                c.sendall(HDR); c.setblocking(False)
                socks[c.fileno()] = c; sel.register(c, selectors.EVENT_READ)
            except Exception:
                time.sleep(0.01)
        for key, _ in sel.select(timeout=0.2):
            c = key.fileobj
            try: d = c.recv(4096)
            except Exception: d = b""
            sel.unregister(c); socks.pop(c.fileno(), None); c.close()
th = threading.Thread(target=opener); th.start()
time.sleep(15)
res = []
while time.time() < stop - 1:
    t = time.time()
    try:
        st = s.status("GET", "/livez")
    except Exception as e:
        st = type(e).__name__
    res.append(st); time.sleep(2)
th.join()
for c in list(socks.values()): c.close()
print("livez answers during the attack (every 2 s over ~54 s):", res)
print("ok count", sum(1 for r in res if r == 200), "of", len(res))
time.sleep(1)
print("after:", s.status("GET", "/livez"), s.rss())
print("exit", s.term())
