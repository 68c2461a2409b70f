from common import *
import urllib.parse
s = Svc("/tmp/fencewatch-hostile/d8")
s.post(('{"kind":"commit","ts":%d,"scope":"a","epoch":2,"route":"r"}\n{"kind":"commit","ts":%d,"scope":"a","epoch":1,"route":"r"}\n' % (now_ns()-5*10**9, now_ns()-3*10**9)).encode())
qs = ["/v1/assurance?at=-9223372036854775808", "/v1/assurance?at=9223372036854775807", "/v1/assurance?at=-1", "/v1/assurance?at=0",
      "/v1/assurance?at=99999999999999999999", "/v1/assurance?window=0s", "/v1/assurance?window=9223372036854775807ns", "/v1/assurance?window=100000000h",
      "/v1/assurance?window=1ns", "/v1/assurance?at=9999-12-31T23:59:59Z", "/v1/assurance?at=2262-04-11T23:47:16.854775807Z", "/v1/assurance?at=2262-04-11T23:47:16.854775808Z",
      "/v1/assurance/timeline?from=0&to=9223372036854775807", "/v1/assurance/timeline?from=-9223372036854775808&to=9223372036854775807",
      "/v1/assurance/timeline?from=1&to=2", "/v1/counterexamples?limit=0", "/v1/counterexamples?limit=1001", "/v1/counterexamples?limit=18446744073709551616",
      "/v1/counterexamples?limit=-1", "/v1/counterexamples?cursor=abc", "/v1/counterexamples?cursor=-9223372036854775808.", "/v1/counterexamples?cursor=9223372036854775807.zzzz",
      "/v1/counterexamples?from=9223372036854775807&to=-9223372036854775808", "/v1/counterexamples?scope=" + "x"*100000, "/v1/scopes/" + "y"*5000,
      "/v1/counterexamples/" + "z"*10000, "/v1/assurance?property=" + "p"*100000, "/v1/assurance?bogus=1", "/v1/assurance?at=1&at=2", "/v1/coverage?property=%FF",
      "/v1/assurance?at=%00"]
for q in qs:
    try:
        st, b, _ = s.req("GET", q, timeout=20)
        print(st, q[:80], b[:200])
    except Exception as e:
        print("EXC", q[:80], e)
print(s.rss())
print("exit", s.term())
