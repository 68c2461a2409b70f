# same as a6 for /v1/logs: 16 MiB OTLP/JSON of empty log records
import sys; import os; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h import *
s = Svc('/tmp/h40/d15')
MB = 1 << 20; n = (16 * MB - 100) // 3
body = b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[' + b"{}," * (n - 1) + b'{}]}]}]}'
t0 = time.time(); r = s.post(body, "application/json", path="/v1/logs"); print("logs:", r[0], r[1][:60], f"{time.time()-t0:.2f}s", s.rss())
body = b'{"resourceSpans":[{"scopeSpans":[{"spans":[' + b'{"attributes":[{}]},' * ((16 * MB - 100) // 20 - 1) + b'{}]}]}]}'
t0 = time.time(); r = s.post(body, "application/json", path="/v1/traces"); print("spans with one empty attribute:", r[0], r[1][:60], f"{time.time()-t0:.2f}s", s.rss())
s.term()
