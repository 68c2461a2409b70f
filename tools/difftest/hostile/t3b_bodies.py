import gzip, zlib, json, time
from common import *
s = Svc("/tmp/fencewatch-hostile/d3")
def show(name, r):
    if isinstance(r, Exception): print(name, "EXC", r, s.rss(), flush=True); return
    st, body, h = r
    try: j = json.loads(body); summ = {k: j[k] for k in j if k in ("accepted","malformed","errors_not_listed","duplicates","title","detail","status")}
    except Exception: summ = body[:120]
    print(f"{name}: {st} answer={len(body)}B {summ} {s.rss()}", flush=True)
MB = 1 << 20
def P(*a, **k):
    try: return s.post(*a, **k)
    except Exception as e: return e
show("deep nesting array element 8M", P(b"[" + b"[" * (7*MB) + b"]" * (7*MB) + b"]", "application/json"))
show("deep nesting NDJSON line 500k", P(b'{"kind":"heartbeat","x":' + b"[" * 500000 + b"]" * 500000 + b"}\n"))
show("unclosed deep array (syntax error)", P(b"[" * (16*MB - 10), "application/json"))
show("one 16 MiB line", P(b'{"kind":"heartbeat","route":"' + b"a" * (16*MB - 100) + b'"}\n'))
show("17 MiB body", P(b"\n" * (17*MB)))
bomb = gzip.compress(b"\n" * (1 << 30), 9)
print("gzip bomb size", len(bomb))
show("gzip bomb 1 GiB", P(bomb, extra_headers={"content-encoding": "gzip"}))
show("deflate bomb 1 GiB", P(zlib.compress(b"{}\n" * (300 * MB), 9), extra_headers={"content-encoding": "deflate"}))
show("gzip, gzip nested", P(gzip.compress(gzip.compress(b"\n" * (100*MB))), extra_headers={"content-encoding": "gzip, gzip"}))
show("zstd", P(b"abc", extra_headers={"content-encoding": "zstd"}))
show("bad gzip", P(b"\x1f\x8b garbage", extra_headers={"content-encoding": "gzip"}))
show("gzip: valid member then trailing garbage", P(gzip.compress(('{"kind":"heartbeat","ts":%d,"route":"r"}\n'%now_ns()).encode()) + b"GARBAGE", extra_headers={"content-encoding": "gzip"}))
show("identity encoding", P(b"\n\n", extra_headers={"content-encoding": "identity"}))
show("content-type text/plain", P(b"{}\n", "text/plain"))
show("no content-type", s.req("POST", "/v1/events", b"{}\n", {}))
m, t = s.metrics("fencewatch_state_bytes", "fencewatch_checkpoint_offset", "fencewatch_wal_next_offset", "fencewatch_events_rejected_total")
print(m)
print("exit", s.term())
