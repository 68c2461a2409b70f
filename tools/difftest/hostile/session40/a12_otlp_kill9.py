# OTLP partial success (gRPC and HTTP JSON/protobuf) then kill -9 right after the answer; restart; are the events there?
import sys; import os; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h import *; from h2raw import *
s = Svc('/tmp/h40/d12')
t = now_ns()
def sp(i, trace, bad=False):
    a = [("fencing.kind", s_any("commit")), ("fencing.scope", s_any(f"o{i}")), ("fencing.epoch", s_any("notanumber") if bad else i_any(3)),
         ("fencing.route", s_any("orders-api.transition")), ("fencing.outcome", s_any("committed"))]
    return span(trace, struct.pack(">Q", i + 1), t + i, a)
expected = 0
for rnd in range(3):
    trace = bytes([rnd + 1]) * 16
    req = traces_req([sp(i, trace, bad=(i % 10 == 0)) for i in range(1000)])
    c = Call(s.gport, grpc_headers(token=TOKEN)); c.send(grpc_msg(req)); r = c.result(); expected += 1000
    print("grpc", r["status"], r["resp"][:40])
    st, b, _ = s.post(traces_req([sp(i, bytes([rnd + 100]) * 16, bad=(i % 10 == 0)) for i in range(1000)]), "application/x-protobuf", path="/v1/traces"); expected += 1000
    print("http pb", st, b[:60])
    s.kill9(); s.start()
def q(sql):
    return json.loads(s.req("POST", "/v1/query", json.dumps({"sql": sql}).encode(), {"content-type": "application/json"})[1])["rows"]
print("expected events+malformed", expected, "events", q("select count(*) from events"), "malformed", q("select count(*) from malformed"),
      "distinct sources", q("select count(distinct source) from events"))
print("exit", s.term())
