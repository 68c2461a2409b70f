# huge strings in fields and millions of distinct names: memory per event, /metrics cardinality
import json, time
from common import *
s = Svc("/tmp/fencewatch-hostile/d5")
MB = 1 << 20
def state():
    m, t = s.metrics("fencewatch_state_bytes", "fencewatch_checkpoint_offset", "fencewatch_wal_next_offset")
    return m, len(t.splitlines()), len(t)
base = now_ns() - 60 * 10**9
print("start", s.rss(), state())
# 1) 1 MB names: 15 events per request (under 16 MiB), 8 requests, each name distinct
for field in ("route", "holder", "emitter", "scope"):
    t0 = time.time()
    for r in range(8):
        lines = []
        for i in range(15):
            name = ("%s-%d-%d-" % (field, r, i)) + "x" * (MB - 200)
            ev = {"kind": "commit", "ts": base + r * 10**8 + i, "scope": "s%d" % i, "epoch": 1, "route": "r", "emitter": "em", "seq": r * 15 + i + 1 + hash(field) % 100000 * 1000}
            if field == "route": ev = {"kind": "heartbeat", "ts": base + r*10**8 + i, "route": name}
            elif field == "scope": ev["scope"] = name[:512]  # scope max 512 bytes
            else: ev[field] = name
            lines.append(json.dumps(ev))
        st, b, _ = s.post(("\n".join(lines) + "\n").encode())
        if st not in (200, 422): print(field, "status", st, b[:200])
    print(f"after 120 x 1MB {field}: status {st} {b[:150]}", s.rss(), state(), round(time.time()-t0,1), "s", flush=True)
# 2) many distinct short names over several requests
for field in ("route", "emitter"):
    t0 = time.time()
    for r in range(10):
        lines = []
        for i in range(100000):
            k = r * 100000 + i
            if field == "route":
                ev = '{"kind":"heartbeat","ts":%d,"route":"u-%d"}' % (base + k * 1000, k)
            elif field == "emitter":
                ev = '{"kind":"heartbeat","ts":%d,"route":"r","emitter":"em-%d","seq":1}' % (base + k * 1000, k)
            else:
                ev = '{"kind":"commit","ts":%d,"scope":"sc","epoch":1,"route":"r","holder":"h-%d"}' % (base + k * 1000, k)
            lines.append(ev)
        st, b, _ = s.post(("\n".join(lines) + "\n").encode())
        if st != 200: print(field, st, b[:200])
    print(f"after 1M distinct {field}s:", s.rss(), state(), round(time.time()-t0,1), "s", flush=True)
m, t = s.metrics("fencewatch_")
labels = [l for l in t.splitlines() if "u-" in l or "em-" in l or "h-" in l]
print("metric lines naming input names:", len(labels), labels[:3])
st, b, _ = s.req("GET", "/v1/coverage")
print("coverage answer bytes", len(b), b[:300])
time.sleep(2.5)
print("checkpoint:", state()[0], "checkpoint files:", sorted(os.listdir(f"{s.d}/data/partitions/0"))[:10])
import subprocess
print(subprocess.run(["du", "-sh", f"{s.d}/data"], capture_output=True, text=True).stdout)
print("exit", s.term())
