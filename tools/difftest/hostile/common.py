import os, socket, subprocess, time, json, re, urllib.request, shutil, signal

BIN = os.path.abspath(os.environ.get("FW", "target/release/fencewatch"))
CONTRACT = """
[[property]]
name = "p"
subject = "Order"
strategy = "lease_epoch"
window = "1s"
clock_skew = "10ms"
allowed_lateness = "2s"
route_freshness = "5m"
  [[property.route]]
  name = "r"
"""


def now_ns():
    return time.time_ns()


class Svc:
    def __init__(self, d, extra=(), fresh=True):
        self.d = d
        if fresh:
            shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d, exist_ok=True)
        open(f"{d}/contract.toml", "w").write(CONTRACT)
        self.extra = list(extra)
        self.start()

    def start(self):
        self.errf = open(f"{self.d}/serve.err", "a")
        self.p = subprocess.Popen([BIN, "serve", "--contract", f"{self.d}/contract.toml", "--data-dir", f"{self.d}/data",
                                   "--listen", "127.0.0.1:0", "--checkpoint-interval", "1s", *self.extra],
                                  stdout=subprocess.PIPE, stderr=self.errf)
        first = self.p.stdout.readline().decode()
        self.port = int(first.strip().rsplit(":", 1)[1])
        self.pid = self.p.pid
        for _ in range(600):
            try:
                if self.status("GET", "/readyz") == 200:
                    return
            except Exception:
                pass
            time.sleep(0.05)
        raise RuntimeError("not ready")

    def rss(self):
        s = open(f"/proc/{self.pid}/status").read()
        g = lambda k: int(re.search(k + r":\s+(\d+)", s).group(1))
        return dict(rss_kb=g("VmRSS"), hwm_kb=g("VmHWM"), fds=len(os.listdir(f"/proc/{self.pid}/fd")))

    def req(self, method, path, body=b"", headers=None, timeout=60):
        r = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=body if method == "POST" else None, method=method,
                                   headers=headers or {})
        try:
            with urllib.request.urlopen(r, timeout=timeout) as resp:
                return resp.status, resp.read(), dict(resp.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read(), dict(e.headers)

    def status(self, m, p):
        return self.req(m, p, timeout=5)[0]

    def metrics(self, *prefixes):
        _, b, _ = self.req("GET", "/metrics")
        t = b.decode()
        out = {}
        for l in t.splitlines():
            for p in prefixes:
                if l.startswith(p):
                    out[l.rsplit(" ", 1)[0]] = float(l.rsplit(" ", 1)[1])
        return out, t

    def post(self, body, ctype="application/x-ndjson", extra_headers=None, timeout=60):
        h = {"content-type": ctype}
        h.update(extra_headers or {})
        return self.req("POST", "/v1/events", body, h, timeout=timeout)

    def term(self):
        self.p.send_signal(signal.SIGTERM)
        return self.p.wait(timeout=60)

    def kill9(self):
        self.p.send_signal(signal.SIGKILL)
        return self.p.wait(timeout=60)

    def log(self):
        return open(f"{self.d}/serve.err").read()


def raw(port, data, read=True, timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(data)
    out = b""
    if read:
        try:
            while True:
                c = s.recv(65536)
                if not c:
                    break
                out += c
        except socket.timeout:
            pass
    s.close()
    return out
