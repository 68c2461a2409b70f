# FINDING: OTLP/JSON body of empty spans: serde builds every Span before items are counted.
# A 16 MiB body (default max_body_bytes) -> ~1.4 GB resident; gzip makes it a 16 KB request.
import sys, threading, gzip; import os; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h import *
s = Svc('/tmp/h40/d6')
MB = 1 << 20
n = (16 * MB - 100) // 3
body = b'{"resourceSpans":[{"scopeSpans":[{"spans":[' + b"{}," * (n - 1) + b'{}]}]}]}'
gz = gzip.compress(body, 9)
print("body", len(body), "gzip", len(gz), "start", s.rss(), flush=True)
t0 = time.time(); r = s.post(body, "application/json", path="/v1/traces"); print("one plain request:", r[0], r[1][:60], f"{time.time()-t0:.2f}s", s.rss(), flush=True)
peak = [0]; stop = threading.Event(); lat = []
def sampler():
    while not stop.is_set():
        x = s.rss()
        if isinstance(x, dict): peak[0] = max(peak[0], x["rss_mb"])
        time.sleep(0.05)
def prober():
    while not stop.is_set():
        lat.append(s.probe()); time.sleep(0.5)
codes = []
def client():
    for i in range(5):
        try: codes.append(s.post(gz, "application/json", {"content-encoding": "gzip"}, path="/v1/traces", timeout=60)[0])
        except Exception as e: codes.append(type(e).__name__)
ths = [threading.Thread(target=sampler), threading.Thread(target=prober)] ; [t.start() for t in ths]
cl = [threading.Thread(target=client) for _ in range(4)]; t0 = time.time(); [t.start() for t in cl]; [t.join() for t in cl]
stop.set(); [t.join() for t in ths]
from collections import Counter
print(f"4 clients x 5 gzip requests of {len(gz)} B: codes={Counter(codes)} t={time.time()-t0:.1f}s peak_rss_mb={peak[0]} now={s.rss()}")
print("worst probe latency", {p: max(x[p][1] for x in lat) for p in ("/livez", "/readyz", "/v1/assurance")}, "non-200", [x for x in lat if any(v[0] != 200 for v in x.values())][:2])
print("exit", s.term())
