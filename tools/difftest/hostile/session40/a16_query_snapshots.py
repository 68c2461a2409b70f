# concurrent queries waiting for one of the two query slots: does each hold a snapshot of the unwritten rows?
import sys, threading; import os; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h import *
s = Svc('/tmp/h40/d16', extra=["--archive-flush-interval", "1h"])
MB = 1 << 20; t = now_ns() - 60 * 10**9
lines = [json.dumps({"kind": "commit", "ts": t + k, "scope": f"s{k}", "epoch": 1, "route": "orders-api.transition", "holder": ("h%d-" % k) + "x" * (MB - 300), "outcome": "committed"}) for k in range(14)]
print(s.post(("\n".join(lines) + "\n").encode())[0], s.rss())
lines = [json.dumps({"kind": "commit", "ts": t + 100 + k, "scope": f"s{k}", "epoch": 1, "route": "orders-api.transition", "holder": ("g%d-" % k) + "x" * (MB - 300), "outcome": "committed"}) for k in range(14)]
print(s.post(("\n".join(lines) + "\n").encode())[0], s.rss())
time.sleep(2)
print([l for l in s.metrics_text().splitlines() if l.startswith("fencewatch_archive_pending_rows") or l.startswith("fencewatch_archive_files ")], s.rss(), flush=True)
peak = [0]; stop = threading.Event()
def sampler():
    while not stop.is_set():
        x = s.rss(); peak[0] = max(peak[0], x["rss_mb"] if isinstance(x, dict) else 0); time.sleep(0.05)
res = []
def long():
    t0 = time.time()
    try: st, b, _ = s.req("POST", "/v1/query", json.dumps({"sql": "SELECT count(*) FROM events, generate_series(1, 100000000)"}).encode(), {"content-type": "application/json"}, timeout=80); res.append((st, round(time.time() - t0, 1)))
    except Exception as e: res.append(str(e)[:50])
sm = threading.Thread(target=sampler); sm.start()
ths = [threading.Thread(target=long) for _ in range(40)]; [x.start() for x in ths]
time.sleep(8); print("during", s.rss(), s.probe(), flush=True)
[x.join() for x in ths]; stop.set(); sm.join()
from collections import Counter
print("40 concurrent queries:", Counter(r[0] if isinstance(r, tuple) else r for r in res), "peak rss MB", peak[0], "now", s.rss())
print("exit", s.term())
