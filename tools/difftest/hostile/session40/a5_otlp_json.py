# OTLP/JSON and OTLP/HTTP protobuf amplification: items decoded before they are counted
import sys, threading; import os; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h import *
s = Svc('/tmp/h40/d5', extra=sys.argv[1:])
MB = 1 << 20
def show(name, r, t0):
    st, b, h = r
    print(f"{name}: {st} {b[:160]!r} t={time.time()-t0:.2f}s rss={s.rss()}", flush=True)
def P(name, body, ct, path="/v1/traces"):
    t0 = time.time()
    try: show(name, s.post(body, ct, path=path, timeout=90), t0)
    except Exception as e: print(name, "EXC", e, s.rss(), flush=True)
n = (16 * MB - 100) // 3
P("JSON 5.6M empty spans {}", b'{"resourceSpans":[{"scopeSpans":[{"spans":[' + b"{}," * (n - 1) + b'{}]}]}]}', "application/json")
P("JSON 5.6M empty resourceSpans", b'{"resourceSpans":[' + b"{}," * (n - 1) + b'{}]}', "application/json")
P("JSON 5.6M empty scopeSpans", b'{"resourceSpans":[{"scopeSpans":[' + b"{}," * (n - 1) + b'{}]}]}', "application/json")
m = (16 * MB - 200) // 12
P("JSON 1.4M empty attributes", b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"attributes":[' + b'{"key":""},' * (m - 1) + b'{"key":""}]}]}]}]}', "application/json")
P("JSON 1.4M events on a span", b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"events":[' + b'{},' * (n - 10) + b'{}]}]}]}]}', "application/json")
P("JSON arrayValue 5M empty values", b'{"resourceSpans":[{"resource":{"attributes":[{"key":"k","value":{"arrayValue":{"values":[' + b'{},' * (n - 40) + b'{}]}}}]}}]}', "application/json")
P("JSON deep nesting 100k", b'{"resourceSpans":[{"resource":{"attributes":[{"key":"k","value":' + b'{"arrayValue":{"values":[' * 100000 + b'{}' + b']}}' * 100000 + b'}]}}]}', "application/json")
P("JSON time with 1M digits", b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"endTimeUnixNano":' + b"9" * MB + b'}]}]}]}', "application/json")
P("JSON time -0", b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"endTimeUnixNano":-0}]}]}]}', "application/json")
# protobuf
from h import fld
P("PB 8M empty resourceSpans", b"\x0a\x00" * (8 * MB - 8), "application/x-protobuf")
P("PB 8M empty scopeSpans", fld(1, 2, b"\x12\x00" * (8 * MB - 16)), "application/x-protobuf")
P("PB 5M empty spans", fld(1, 2, fld(2, 2, b"\x12\x00" * ((16 * MB - 64) // 2 - 8))), "application/x-protobuf")
kvs = b"".join(fld(9, 2, kv(f"fencing.zz{i}", s_any("v"))) for i in range(400000))
P("PB 1 span 400k unknown fencing.* keys", fld(1, 2, fld(2, 2, fld(2, 2, kvs))), "application/x-protobuf")
# resource with many attributes + many spans
t = now_ns()
res = b"".join(fld(1, 2, kv(f"r{i}", s_any("v"))) for i in range(200000))
spx = b"".join(fld(2, 2, span(b"\x01" * 16, struct.pack(">Q", i + 1), t, [("fencing.kind", s_any("heartbeat")), ("fencing.route", s_any("orders-api.transition"))])) for i in range(50000))
P("PB resource 200k attrs + 50k spans", fld(1, 2, fld(1, 2, res) + fld(2, 2, spx)), "application/x-protobuf")
print("final", s.rss(), s.probe())
print(s.log()[-1200:])
print("exit", s.term())
