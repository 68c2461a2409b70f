import time, sys
from common import *
s = Svc("/tmp/fencewatch-hostile/d11")
base = now_ns() - 60 * 10**9
n = int(sys.argv[1])
lines = ['{"kind":"heartbeat","ts":%d,"route":"r","emitter":"em-%d","seq":1}' % (base + k * 1000, k) for k in range(n)]
print("post", s.post(("\n".join(lines) + "\n").encode())[0])
time.sleep(2.5)
print("alive:", s.p.poll() is None, [l[:160] for l in s.log().splitlines() if "panicked" in l or "ERROR" in l][:3])
if s.p.poll() is None: print("exit", s.term())
