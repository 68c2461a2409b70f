import gzip, zlib, json, time
from common import *
s = Svc("/tmp/fencewatch-hostile/d3")
def show(name, r):
    st, body, h = r
    try: j = json.loads(body); summ = {k: j[k] for k in j if k in ("accepted","malformed","errors_not_listed","duplicates","title","detail","status")}
    except Exception: summ = body[:120]
    print(f"{name}: {st} answer={len(body)}B {summ} {s.rss()}", flush=True)
MB = 1 << 20
show("8M '{}' lines (16 MiB)", s.post(b"{}\n" * (16*MB//3)))
show("16 MiB of newlines", s.post(b"\n" * (16*MB - 10)))
show("16 MiB of 'x\\n'", s.post(b"x\n" * (8*MB - 10)))
show("JSON array of 8M tiny elements", s.post(b"[" + b"1," * (8*MB - 4) + b"1]", "application/json"))
show("JSON array of 4M {} elements", s.post(b"[" + b"{}," * (16*MB//3 - 2) + b"{}]", "application/json"))
show("deep nesting array element 8M", s.post(b"[" + b"[" * (8*MB) + b"]" * (8*MB) + b"]", "application/json"))
show("deep nesting NDJSON line 500k", s.post(b'{"kind":"heartbeat","x":' + b"[" * 500000 + b"]" * 500000 + b"}\n"))
show("unclosed deep array (syntax error)", s.post(b"[" * (16*MB - 10), "application/json"))
show("one 16 MiB line", s.post(b'{"kind":"heartbeat","route":"' + b"a" * (16*MB - 100) + b'"}\n'))
show("17 MiB body", s.post(b"\n" * (17*MB)))
bomb = gzip.compress(b"\n" * (1 << 30), 9)
print("gzip bomb size", len(bomb))
show("gzip bomb 1 GiB", s.post(bomb, extra_headers={"content-encoding": "gzip"}))
show("deflate bomb 1 GiB", s.post(zlib.compress(b"{}\n" * (300 * MB), 9), extra_headers={"content-encoding": "deflate"}))
show("gzip, gzip nested", s.post(gzip.compress(gzip.compress(b"\n" * (100*MB))), extra_headers={"content-encoding": "gzip, gzip"}))
show("zstd", s.post(b"abc", extra_headers={"content-encoding": "zstd"}))
show("bad gzip", s.post(b"\x1f\x8b garbage", extra_headers={"content-encoding": "gzip"}))
show("gzip: valid member then trailing garbage", s.post(gzip.compress(('{"kind":"heartbeat","ts":%d,"route":"r"}\n'%now_ns()).encode()) + b"GARBAGE", extra_headers={"content-encoding": "gzip"}))
show("identity encoding", s.post(b"\n\n", extra_headers={"content-encoding": "identity"}))
show("content-type text/plain", s.post(b"{}\n", "text/plain"))
show("no content-type", s.req("POST", "/v1/events", b"{}\n", {}))
m, t = s.metrics("fencewatch_state_bytes", "fencewatch_checkpoint_offset", "fencewatch_wal_next_offset", "fencewatch_events_rejected_total")
print(m)
print("exit", s.term())
