# a hot scope: N commits of one scope inside the horizon (same epoch, same holder) in one request
import time, sys
from common import *
s = Svc("/tmp/fencewatch-hostile/d6")
base = now_ns() - 20 * 10**9
off = 0
for n in (tuple(int(x) for x in sys.argv[2].split(",")) if len(sys.argv) > 2 else (2000, 4000, 8000, 16000)):
    holder = sys.argv[1] if len(sys.argv) > 1 else "same"
    lines = []
    for i in range(n):
        h = "w" if holder == "same" else "w%d" % (off + i)
        lines.append('{"kind":"commit","ts":%d,"scope":"hot-%d","epoch":1,"route":"r","holder":"%s"}' % (base + (off + i) * 1000, n, h))
    off += n
    t = time.time(); st, b, _ = s.post(("\n".join(lines) + "\n").encode(), timeout=120); dt = time.time() - t
    t2 = time.time(); lz = s.status("GET", "/livez"); 
    print(f"{holder} holder, {n} commits of one scope in one request: {st} in {dt:.2f} s ({dt/n*1e6:.0f} us/event)", s.rss(), flush=True)
print("exit", s.term())
