import sys; import os; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h import *
s = Svc('/tmp/h40/d8b')
sql = "SELECT " + "+".join(["1"] * 200000)
for auth in (False,):
    try: st, b, _ = s.req("POST", "/v1/query", json.dumps({"sql": sql}).encode(), {"content-type": "application/json"}, timeout=60, auth=auth); print("noauth", st, b[:100])
    except Exception as e: print("noauth EXC", e)
time.sleep(0.5); print("alive", s.p.poll() is None, s.probe()); s.term()
