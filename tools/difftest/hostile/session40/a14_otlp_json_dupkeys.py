# OTLP/JSON with a key given twice: answered 200 (no partial success); which spans are stored?
import sys; import os; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h import *
s = Svc('/tmp/h40/d14')
t = now_ns() - 2 * 10**9
def spn(i, epoch=3):
    return {"traceId": "%032x" % (i + 1), "spanId": "%016x" % (i + 1), "name": "x", "startTimeUnixNano": str(t + i - 10), "endTimeUnixNano": str(t + i),
            "attributes": [{"key": "fencing.kind", "value": {"stringValue": "commit"}}, {"key": "fencing.scope", "value": {"stringValue": f"o{i}"}},
                           {"key": "fencing.epoch", "value": {"intValue": str(epoch)}}, {"key": "fencing.route", "value": {"stringValue": "orders-api.transition"}},
                           {"key": "fencing.outcome", "value": {"stringValue": "committed"}}]}
def rs(spans): return json.dumps({"scopeSpans": [{"spans": spans}]})
cases = {
 "resourceSpans twice": '{"resourceSpans":[%s],"resourceSpans":[%s]}' % (rs([spn(1)]), rs([spn(2)])),
 "spans twice": '{"resourceSpans":[{"scopeSpans":[{"spans":[%s],"spans":[%s]}]}]}' % (json.dumps(spn(3)), json.dumps(spn(4))),
 "scopeSpans twice": '{"resourceSpans":[{"scopeSpans":[{"spans":[%s]}],"scopeSpans":[{"spans":[%s]}]}]}' % (json.dumps(spn(5)), json.dumps(spn(6))),
 "attributes twice (epoch 9 in second list)": '{"resourceSpans":[{"scopeSpans":[{"spans":[%s]}]}]}' % json.dumps(spn(7))[:-1].replace('"attributes"', '"attributes":[{"key":"fencing.epoch","value":{"intValue":"1"}}],"attributes"', 1) + "}",
 "intValue and stringValue in one value": '{"resourceSpans":[{"scopeSpans":[{"spans":[%s]}]}]}' % json.dumps(spn(8)).replace('{"intValue": "3"}', '{"intValue": "3", "stringValue": "x"}'),
 "endTimeUnixNano twice": '{"resourceSpans":[{"scopeSpans":[{"spans":[%s]}]}]}' % json.dumps(spn(9)).replace('"endTimeUnixNano"', '"endTimeUnixNano": "1", "endTimeUnixNano"'),
 "camel and snake both": '{"resourceSpans":[%s],"resource_spans":[%s]}' % (rs([spn(10)]), rs([spn(11)])),
}
for name, body in cases.items():
    st, b, _ = s.post(body.encode(), "application/json", path="/v1/traces")
    print(f"{name}: {st} {b[:200]!r}")
time.sleep(0.3)
print(s.req("POST", "/v1/query", json.dumps({"sql": "select scope, epoch from events order by scope"}).encode(), {"content-type": "application/json"})[1])
print(s.req("POST", "/v1/query", json.dumps({"sql": "select reason, line from malformed"}).encode(), {"content-type": "application/json"})[1][:600])
print("exit", s.term())
