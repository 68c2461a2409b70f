# /metrics cardinality from client-chosen methods, paths, gRPC paths, content types, malformed reasons
import sys; import os; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h import *; from h2raw import *
s = Svc('/tmp/h40/d9')
def nseries():
    t = s.metrics_text(); return len([l for l in t.splitlines() if l and not l.startswith("#")])
base = nseries(); print("series at start", base)
def raw(data):
    c = socket.create_connection(("127.0.0.1", s.port), timeout=5); c.sendall(data)
    try: out = c.recv(200)
    except Exception as e: out = str(e).encode()
    c.close(); return out
print(raw(b"FOOBAR1 /livez HTTP/1.1\r\nHost: x\r\n\r\n")[:40])
for i in range(300): raw(b"M%d /livez HTTP/1.1\r\nHost: x\r\n\r\n" % i)
print("after 300 custom methods (no token)", nseries())
for i in range(300): raw(b"GET /nope/%d HTTP/1.1\r\nHost: x\r\n\r\n" % i)
print("after 300 unknown paths", nseries())
for i in range(300): raw(b"GET /v1/x%d HTTP/1.1\r\nHost: x\r\n\r\n" % i)
print("after 300 unknown /v1 paths (401)", nseries())
for i in range(300): raw(b"M%d /v1/events HTTP/1.1\r\nHost: x\r\n\r\n" % i)
print("after 300 custom methods on /v1/events", nseries())
for i in range(200): raw(b"GET /v1/scopes/s%d HTTP/1.1\r\nHost: x\r\nauthorization: Bearer s3cret-token\r\n\r\n" % i)
print("after 200 scope lookups (token)", nseries())
for i in range(200):
    c = Call(s.gport, grpc_headers(path=f"/svc{i}.X/Export")); c.send(grpc_msg(b"")); c.result(timeout=2)
print("after 200 gRPC unknown paths (no token)", nseries())
for i in range(100):
    c = Call(s.gport, grpc_headers(path=f"/opentelemetry.proto.collector.trace.v1.TraceService/Export{i}", token=TOKEN)); c.send(grpc_msg(b"")); c.result(timeout=2)
print("after 100 gRPC unknown methods (token)", nseries())
t = now_ns()
lines = "\n".join(json.dumps({"kind": f"k{i}", "ts": t, "route": f"r{i}", "property": f"p{i}", "scope": "a", "epoch": 1, f"f{i}": 1}) for i in range(300))
print(s.post(lines.encode())[0]); print("after 300 odd kinds/properties", nseries())
lines = "\n".join(json.dumps({"kind": "commit", "ts": t - i, "route": f"undeclared{i}", "property": "order-mutation", "scope": f"s{i}", "epoch": 1, "holder": "h"}) for i in range(300))
print(s.post(lines.encode())[0]); print("after 300 undeclared routes", nseries())
lines = "\n".join(json.dumps({"kind": "attestation", "ts": t, "premise": f"pr{i}", "property": "order-mutation", "attester": f"a{i}", "outcome":"passed", "route": f"rr{i}"}) for i in range(300))
print(s.post(lines.encode())[0]); print("after 300 attestations w/ odd premises", nseries())
txt = s.metrics_text()
import collections
c = collections.Counter(l.split("{")[0] for l in txt.splitlines() if l and not l.startswith("#"))
print(c.most_common(8))
print([l for l in txt.splitlines() if "M1" in l or "nope" in l or "svc1" in l][:5])
print("exit", s.term())
