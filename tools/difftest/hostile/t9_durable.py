import threading, time, json, subprocess, sys
from common import *
mode = sys.argv[1]  # term | kill
s = Svc("/tmp/fencewatch-hostile/d9" + mode)
base = now_ns() - 30 * 10**9
acked, answered, lock = [], [], threading.Lock()
stop = [False]
def worker(w):
    i = 0
    while not stop[0]:
        sc = "b-%d-%d" % (w, i)
        lines = ['{"kind":"commit","ts":%d,"scope":"%s","epoch":2,"route":"r"}' % (base + i * 1000, sc),
                 '{"kind":"commit","ts":%d,"scope":"%s","epoch":1,"route":"r"}' % (base + i * 1000 + 10**9, sc)]
        lines += ['{"kind":"heartbeat","ts":%d,"route":"r"}' % (base + i * 1000 + k) for k in range(498)]
        try:
            st, b, _ = s.post(("\n".join(lines) + "\n").encode(), timeout=30)
        except Exception as e:
            st = type(e).__name__
        with lock:
            answered.append((sc, st))
            if st == 200: acked.append(sc)
        i += 1
ths = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
[t.start() for t in ths]
time.sleep(3)
m, _ = s.metrics("fencewatch_wal_next_offset", "fencewatch_checkpoint_offset")
print("before signal", m)
if mode == "term": s.p.send_signal(signal.SIGTERM)
else: s.p.send_signal(signal.SIGKILL)
code = s.p.wait(timeout=60); stop[0] = True
[t.join() for t in ths]
print("exit code", code, "answered", len(answered), "acked", len(acked), "statuses", sorted(set(str(a[1]) for a in answered)))
print("inspect:", subprocess.run([BIN, "wal", "inspect", "--data-dir", f"{s.d}/data", "--format", "json"], capture_output=True, text=True).stdout[:400])
s.start()
m, _ = s.metrics("fencewatch_wal_next_offset", "fencewatch_checkpoint_offset")
print("after restart", m)
scopes = set(); cur = None
while True:
    st, b, _ = s.req("GET", "/v1/counterexamples?limit=1000" + (f"&cursor={cur}" if cur else ""))
    j = json.loads(b)
    scopes |= {c["scope"] for c in j["counterexamples"]}
    cur = j.get("next_cursor")
    if not cur: break
missing = [a for a in acked if a not in scopes]
unacked_present = [a for a, st in answered if st != 200 and a in scopes]
print("acked batches missing after restart:", len(missing), missing[:5], "| unacknowledged batches present:", len(unacked_present), unacked_present[:5])
print("exit", s.term())
