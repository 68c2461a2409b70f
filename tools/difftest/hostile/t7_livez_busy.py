import time, threading
from common import *
s = Svc("/tmp/fencewatch-hostile/d7")
base = now_ns() - 20 * 10**9
lines = ['{"kind":"commit","ts":%d,"scope":"hot","epoch":1,"route":"r"}' % (base + i * 1000) for i in range(50000)]
res = {}
def post():
    t = time.time(); res["post"] = (s.post(("\n".join(lines) + "\n").encode(), timeout=120)[0], round(time.time() - t, 1))
th = threading.Thread(target=post); th.start()
time.sleep(1)
for path in ("/livez", "/metrics", "/v1/assurance", "/readyz"):
    t = time.time()
    try: st = s.req("GET", path, timeout=15)[0]
    except Exception as e: st = type(e).__name__
    print(path, "while the writer is busy:", st, round(time.time() - t, 2), "s", flush=True)
th.join(); print("post:", res)
t = time.time(); print("livez after:", s.status("GET", "/livez"), round(time.time()-t,2))
print("exit", s.term())
