# FINDING candidate: /v1/scopes/{scope}?limit=1000 answers are not bounded like /v1/query's (32 MiB, two at a time).
# Uses the data of a10 (120 commits of scope "big", ~1 MB holders). N clients ask and never read.
import sys, threading; import os; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h import *
s = Svc('/tmp/h40/d10', fresh=False)
N = int(sys.argv[1]) if len(sys.argv) > 1 else 16
print("start", s.rss(), flush=True)
socks = []
for i in range(N):
    c = socket.create_connection(("127.0.0.1", s.port)); c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    c.sendall(b"GET /v1/scopes/big?limit=1000 HTTP/1.1\r\nHost: x\r\nauthorization: Bearer s3cret-token\r\n\r\n"); socks.append(c)
peak = 0
for i in range(40):
    x = s.rss(); peak = max(peak, x["rss_mb"]); time.sleep(0.5)
print(f"{N} unread /v1/scopes answers: peak rss MB {peak}", s.rss(), s.probe(), flush=True)
for c in socks: c.close()
time.sleep(3); print("after close", s.rss())
print("exit", s.term())
