import sys, threading, gzip; import os; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h import *; from h2raw import *
s = Svc('/tmp/h40/d3')
P = s.gport
def call(msg_bytes, extra=(), end=True, timeout=10, token=TOKEN, path=None):
    hb = grpc_headers(token=token, extra=extra) if path is None else grpc_headers(path=path, token=token, extra=extra)
    t = time.time(); c = Call(P, hb, timeout=timeout); snd = c.send(msg_bytes, end=end); r = c.result(); r["t"] = round(time.time() - t, 2)
    if snd != "sent": r["send"] = snd
    return r
t = now_ns()
def sp(i, kind="commit", sid=None, trace=b"\x01" * 16):
    return span(trace, sid or struct.pack(">Q", i + 1), t + i, [("fencing.kind", s_any(kind)), ("fencing.scope", s_any(f"o{i}")),
                ("fencing.epoch", i_any(3)), ("fencing.route", s_any("orders-api.transition")), ("fencing.outcome", s_any("committed"))])
good = traces_req([sp(0)])
print("valid", call(grpc_msg(good)))
print("no token", call(grpc_msg(good), token=None))
print("wrong token", call(grpc_msg(good), token="s3cret-tokeX"))
print("len prefix 0xFFFFFFFF small body", call(grpc_msg(good, declared=0xFFFFFFFF)))
print("len prefix 15MiB small body, end", call(grpc_msg(good, declared=15 << 20)))
print("len prefix 15MiB small body, no end (wait)", call(grpc_msg(good, declared=15 << 20), end=False, timeout=40))
print("compressed flag no grpc-encoding", call(grpc_msg(good, compressed=1)))
print("compressed flag=2", call(grpc_msg(good, compressed=2)))
print("grpc-encoding gzip bomb 200MB", call(grpc_msg(gzip.compress(b"\x00" * (200 << 20)), compressed=1), extra=(("grpc-encoding", "gzip"),)))
print("grpc-encoding zstd", call(grpc_msg(b"abc", compressed=1), extra=(("grpc-encoding", "zstd"),)))
print("grpc-encoding gzip,gzip", call(grpc_msg(gzip.compress(gzip.compress(good)), compressed=1), extra=(("grpc-encoding", "gzip,gzip"),)))
print("two messages in one stream", call(grpc_msg(good) + grpc_msg(traces_req([sp(1)]))))
print("empty stream", call(b""))
print("5 bytes header only", call(b"\x00\x00\x00\x00\x00"))
print("partial header 3 bytes", call(b"\x00\x00\x00"))
print("unknown method path", call(grpc_msg(good), path="/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"))
print("logs service w/ trace payload", call(grpc_msg(good), path="/opentelemetry.proto.collector.logs.v1.LogsService/Export"))
def nested(depth, kind="arr"):
    v = s_any("x")
    for _ in range(depth):
        v = fld(5, 2, fld(1, 2, v)) if kind == "arr" else fld(6, 2, fld(1, 2, kv("k", v)))
    return v
for d in (98, 99, 100, 101, 5000, 200000):
    for kind in ("arr", "kv"):
        body = traces_req([span(b"\x01" * 16, b"\x09" * 8, t, [("fencing.kind", s_any("heartbeat")), ("fencing.route", s_any("orders-api.transition")), ("deep", nested(d, kind))])])
        print(f"nested {kind} depth {d} ({len(body)}B)", call(grpc_msg(body)), s.rss())
print("rss", s.rss(), s.probe())
print(s.log()[-1500:])
print("exit", s.term())
