# in-service fixed SQL: /v1/scopes/{scope}?limit=1000 over events carrying ~1 MB holders; concurrent readers
import sys, threading; import os; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h import *
s = Svc('/tmp/h40/d10', extra=["--archive-flush-interval", "2s"])
t = now_ns() - 60 * 10**9
MB = 1 << 20
k = 0
for r in range(8):
    lines = []
    for j in range(15):
        lines.append(json.dumps({"kind": "commit", "ts": t + k * 1000, "scope": "big", "epoch": 1 + k, "route": "orders-api.transition", "holder": ("h%d-" % k) + "x" * (MB - 300), "outcome": "committed"}))
        k += 1
    st, b, _ = s.post(("\n".join(lines) + "\n").encode())
    print("post", r, st, b[:80], s.rss(), flush=True)
time.sleep(5)
print("before reads", s.rss(), flush=True)
peak = [0]; stop = threading.Event()
def sampler():
    while not stop.is_set():
        x = s.rss(); peak[0] = max(peak[0], x["rss_mb"] if isinstance(x, dict) else 0); time.sleep(0.05)
res = []
def reader():
    for i in range(2):
        t0 = time.time()
        try:
            st, b, _ = s.req("GET", "/v1/scopes/big?limit=1000", timeout=90); res.append((st, len(b) >> 20, round(time.time() - t0, 1)))
        except Exception as e: res.append(str(e)[:60])
sm = threading.Thread(target=sampler); sm.start()
ths = [threading.Thread(target=reader) for _ in range(6)]; [x.start() for x in ths]
time.sleep(3); print("probe during", s.probe(), flush=True)
[x.join() for x in ths]; stop.set(); sm.join()
print("6 readers x2 /v1/scopes/big?limit=1000:", res, "peak rss MB", peak[0], "now", s.rss())
print("exit", s.term())
