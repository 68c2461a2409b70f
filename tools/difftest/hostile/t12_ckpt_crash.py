import time, sys, json
from common import *
s = Svc("/tmp/fencewatch-hostile/d12")
base = now_ns() - 60 * 10**9
# 1) 120 commits with 1 MB distinct holders, 2) 200k heartbeats on distinct undeclared routes
for r in range(8):
    lines = [json.dumps({"kind": "commit", "ts": base + r * 10**8 + i, "scope": "s%d" % i, "epoch": 1, "route": "r", "holder": "h-%d-%d-" % (r, i) + "x" * (2**20 - 200)}) for i in range(15)]
    s.post(("\n".join(lines) + "\n").encode())
for r in range(3):
    lines = ['{"kind":"heartbeat","ts":%d,"route":"u-%d"}' % (base + 10**9 + (r * 100000 + k) * 1000, r * 100000 + k) for k in range(100000)]
    try: print("post", r, s.post(("\n".join(lines) + "\n").encode())[0])
    except Exception as e: print("post", r, e)
    time.sleep(1.5)
print("alive:", s.p.poll() is None, [l[:200] for l in s.log().splitlines() if "panicked" in l or "ERROR" in l][:3])
if s.p.poll() is None: print("exit", s.term())
