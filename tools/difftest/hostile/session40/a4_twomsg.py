# gRPC unary stream carrying two length-prefixed messages: answered OK; is the second message's event stored?
import sys; import os; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h import *; from h2raw import *
s = Svc('/tmp/h40/d4')
t = now_ns()
def sp(i):
    return span(b"\x01" * 16, struct.pack(">Q", i + 1), t + i, [("fencing.kind", s_any("commit")), ("fencing.scope", s_any(f"o{i}")),
                ("fencing.epoch", i_any(3)), ("fencing.route", s_any("orders-api.transition")), ("fencing.outcome", s_any("committed"))])
c = Call(s.gport, grpc_headers(token=TOKEN)); c.send(grpc_msg(traces_req([sp(0)])) + grpc_msg(traces_req([sp(1)]))); print("answer", c.result())
time.sleep(0.5)
print(s.req("POST", "/v1/query", json.dumps({"sql": "select scope, source from events order by scope"}).encode(), {"content-type": "application/json"})[1])
print([l for l in s.metrics_text().splitlines() if l.startswith("fencewatch_events_ingested_total") or l.startswith("fencewatch_otlp_grpc_request_duration_seconds_count")])
s.term()
