import gzip, zlib, json
from common import *
s = Svc("/tmp/fencewatch-hostile/d4")
t = now_ns() - 10**9
a = ('{"kind":"heartbeat","ts":%d,"route":"r","emitter":"e","seq":1}\n' % t).encode()
b = ('{"kind":"heartbeat","ts":%d,"route":"r","emitter":"e","seq":2}\n{"kind":"heartbeat","ts":%d,"route":"r","emitter":"e","seq":3}\n' % (t+1, t+2)).encode()
for name, body in [("two gzip members (cat a.gz b.gz)", gzip.compress(a) + gzip.compress(b)),
                   ("gzip member + trailing garbage", gzip.compress(a) + b"\x00garbage"),
                   ("gzip member + a truncated second member", gzip.compress(a) + gzip.compress(b)[:-8]),
                   ("deflate stream + trailing bytes", zlib.compress(a) + b),
                   ("truncated gzip (no trailer)", gzip.compress(a + b)[:-8])]:
    st, body_, h = s.post(body, extra_headers={"content-encoding": "gzip" if "deflate" not in name else "deflate"})
    print(name, "->", st, body_[:300])
m,_ = s.metrics("fencewatch_events_ingested_total", "fencewatch_wal_next_offset")
print(m)
print(s.req("GET", "/v1/coverage")[1][:600])
print("exit", s.term())
