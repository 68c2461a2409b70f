import socket, time, subprocess, json
from common import *
s = Svc("/tmp/fencewatch-hostile/d10")
base = now_ns() - 30 * 10**9
lines = ['{"kind":"commit","ts":%d,"scope":"big-%d","epoch":1,"route":"r","emitter":"big","seq":%d}' % (base + i, i, i + 1) for i in range(120000)]
body = ("\n".join(lines) + "\n").encode()
print("body bytes", len(body))
c = socket.create_connection(("127.0.0.1", s.port))
c.sendall(b"POST /v1/events HTTP/1.1\r\nHost: x\r\ncontent-type: application/x-ndjson\r\ncontent-length: %d\r\n\r\n" % len(body))
c.sendall(body[: len(body) // 2]); time.sleep(0.3)
s.kill9(); c.close()
r = subprocess.run([BIN, "wal", "inspect", "--data-dir", f"{s.d}/data"], capture_output=True, text=True); print("inspect mid-upload kill:", r.returncode, r.stdout[-300:])
s.start(); m,_ = s.metrics("fencewatch_wal_next_offset"); print("after restart:", m)
# whole body sent, kill right after the last byte (during WAL write/fsync/apply)
c = socket.create_connection(("127.0.0.1", s.port))
c.sendall(b"POST /v1/events HTTP/1.1\r\nHost: x\r\ncontent-type: application/x-ndjson\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
time.sleep(0.05); s.kill9(); c.close()
r = subprocess.run([BIN, "wal", "inspect", "--data-dir", f"{s.d}/data"], capture_output=True, text=True); print("inspect after-upload kill:", r.returncode, r.stdout[-400:])
s.start(); m,_ = s.metrics("fencewatch_wal_next_offset", "fencewatch_events_ingested_total"); print("after restart:", m, "(either 0 or 120000 expected)")
print([l for l in s.log().splitlines() if "WARN" in l or "ERROR" in l][-3:])
print("exit", s.term())
