import os, socket, subprocess, time, json, re, urllib.request, shutil, signal, struct
# Run from the repository root (FW, as the other tools); data under /tmp/h40 (the contract is
# generated there on first use).
BIN = os.path.abspath(os.environ.get("FW", "target/release/fencewatch"))
WORK = "/tmp/h40"


def contract():
    c = f"{WORK}/c.toml"
    if not os.path.exists(c):
        os.makedirs(WORK, exist_ok=True)
        subprocess.run([BIN, "simulate", "--events", "1000", "--output", f"{WORK}/e.ndjson",
                        "--contract-out", c], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return c
TOKEN = "s3cret-token"
class Svc:
    def __init__(self, d, extra=(), fresh=True, token=True):
        self.d = d
        if fresh: shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d, exist_ok=True)
        shutil.copy(contract(), f"{d}/c.toml")
        self.extra = list(extra) + (["--auth-token", TOKEN] if token else [])
        self.start()
    def start(self):
        self.errf = open(f"{self.d}/serve.err", "a")
        gp = free_port()
        self.gport = gp
        self.p = subprocess.Popen([BIN, "serve", "--contract", f"{self.d}/c.toml", "--data-dir", f"{self.d}/data",
              "--listen", "127.0.0.1:0", "--otlp-grpc-listen", f"127.0.0.1:{gp}", "--checkpoint-interval", "2s", *self.extra],
              stdout=subprocess.PIPE, stderr=self.errf)
        first = self.p.stdout.readline().decode()
        self.port = int(first.strip().rsplit(":", 1)[1]); self.pid = self.p.pid
        for _ in range(600):
            try:
                if self.status("/readyz") == 200: return
            except Exception: pass
            time.sleep(0.05)
        raise RuntimeError("not ready")
    def rss(self):
        try: s = open(f"/proc/{self.pid}/status").read()
        except Exception: return "DEAD"
        g = lambda k: int(re.search(k + r":\s+(\d+)", s).group(1))
        return dict(rss_mb=g("VmRSS")//1024, hwm_mb=g("VmHWM")//1024, thr=g("Threads"), fds=len(os.listdir(f"/proc/{self.pid}/fd")))
    def req(self, method, path, body=b"", headers=None, timeout=60, auth=True):
        h = dict(headers or {})
        if auth: h["authorization"] = "Bearer " + TOKEN
        r = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=body if method == "POST" else None, method=method, headers=h)
        try:
            with urllib.request.urlopen(r, timeout=timeout) as resp: return resp.status, resp.read(), dict(resp.headers)
        except urllib.error.HTTPError as e: return e.code, e.read(), dict(e.headers)
    def status(self, p, timeout=5):
        return self.req("GET", p, timeout=timeout)[0]
    def probe(self):
        out = {}
        for p in ("/livez", "/readyz", "/v1/assurance"):
            t = time.time()
            try: st = self.status(p, timeout=10)
            except Exception as e: st = type(e).__name__
            out[p] = (st, round(time.time() - t, 3))
        return out
    def post(self, body, ctype="application/x-ndjson", extra_headers=None, timeout=60, path="/v1/events", auth=True):
        h = {"content-type": ctype}; h.update(extra_headers or {})
        return self.req("POST", path, body, h, timeout=timeout, auth=auth)
    def term(self):
        self.p.send_signal(signal.SIGTERM); return self.p.wait(timeout=60)
    def kill9(self):
        self.p.send_signal(signal.SIGKILL); return self.p.wait(timeout=60)
    def log(self): return open(f"{self.d}/serve.err").read()
    def metrics_text(self):
        return self.req("GET", "/metrics")[1].decode()
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
def now_ns(): return time.time_ns()
# protobuf helpers
def varint(n):
    out = b""
    while True:
        b = n & 0x7f; n >>= 7
        if n: out += bytes([b | 0x80])
        else: return out + bytes([b])
def fld(num, wt, payload):
    if wt == 2: return varint(num << 3 | 2) + varint(len(payload)) + payload
    if wt == 0: return varint(num << 3) + varint(payload)
    if wt == 1: return varint(num << 3 | 1) + struct.pack("<Q", payload)
def s_any(s): return fld(1, 2, s.encode() if isinstance(s, str) else s)
def i_any(i): return fld(3, 0, i)
def kv(k, anyv): return fld(1, 2, k.encode()) + fld(2, 2, anyv)
def span(trace, sid, end_ns, attrs, name=b"x"):
    b = fld(1, 2, trace) + fld(2, 2, sid) + fld(5, 2, name) + fld(7, 1, end_ns - 1000) + fld(8, 1, end_ns)
    for k, v in attrs: b += fld(9, 2, kv(k, v))
    return b
def traces_req(spans, res_attrs=()):
    ss = b"".join(fld(2, 2, s) for s in spans)
    res = b"".join(fld(1, 2, kv(k, v)) for k, v in res_attrs)
    rs = fld(1, 2, res) + fld(2, 2, ss)
    return fld(1, 2, rs)
