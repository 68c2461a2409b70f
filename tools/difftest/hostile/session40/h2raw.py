import socket, struct, time
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST, SETTINGS, PUSH, PING, GOAWAY, WU, CONT = range(10)
def frame(t, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([t, flags]) + struct.pack(">I", sid) + payload
def hint(n, prefix, first=0):
    mx = (1 << prefix) - 1
    if n < mx: return bytes([first | n])
    out = [first | mx]; n -= mx
    while n >= 128: out.append((n & 127) | 128); n >>= 7
    out.append(n); return bytes(out)
def lit(name, value, index=False):
    name = name.encode() if isinstance(name, str) else name; value = value.encode() if isinstance(value, str) else value
    return (b"\x40" if index else b"\x00") + hint(len(name), 7) + name + hint(len(value), 7) + value
def grpc_headers(path="/opentelemetry.proto.collector.trace.v1.TraceService/Export", token=None, extra=()):
    h = lit(":method", "POST") + lit(":scheme", "http") + lit(":path", path) + lit(":authority", "x") + \
        lit("content-type", "application/grpc") + lit("te", "trailers")
    if token: h += lit("authorization", "Bearer " + token)
    for k, v in extra: h += lit(k, v)
    return h
def settings(pairs=()):
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in pairs))
class Conn:
    def __init__(self, port, init=((4, 1 << 30),), timeout=10):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.s.sendall(PREFACE + settings(init) + frame(WU, 0, 0, struct.pack(">I", (1 << 30))))
        self.buf = b""
    def send(self, b): self.s.sendall(b)
    def read_frames(self, until=None, timeout=5):
        self.s.settimeout(timeout); out = []; end = time.time() + timeout
        while time.time() < end:
            while len(self.buf) >= 9:
                ln = int.from_bytes(self.buf[:3], "big")
                if len(self.buf) < 9 + ln: break
                t, fl, sid = self.buf[3], self.buf[4], int.from_bytes(self.buf[5:9], "big") & 0x7fffffff
                out.append((t, fl, sid, self.buf[9:9 + ln])); self.buf = self.buf[9 + ln:]
                if t == SETTINGS and not fl & 1: self.s.sendall(frame(SETTINGS, 1, 0))
                if until and until(out): return out
            try:
                d = self.s.recv(1 << 20)
            except socket.timeout: break
            except Exception as e: out.append(("EXC", str(e))); break
            if not d: out.append(("EOF",)); break
            self.buf += d
        return out
    def close(self): self.s.close()
def summarize(frames):
    from collections import Counter
    c = Counter(f[0] if f[0] != "EXC" else "EXC" for f in frames)
    extra = [f for f in frames if f[0] in (GOAWAY, RST)][:3]
    return dict(c), [(f[0], f[2], f[3][:40]) for f in extra]
def grpc_msg(payload, compressed=0, declared=None):
    return bytes([compressed]) + struct.pack(">I", len(payload) if declared is None else declared) + payload
import hpack
class Call:
    """one gRPC call with flow control respected"""
    def __init__(self, port, hb, timeout=10):
        self.c = Conn(port); self.dec = hpack.Decoder(); self.dec.max_header_list_size = 1 << 24
        self.cwin = 65535; self.swin = 65535; self.timeout = timeout
        self.c.send(frame(HEADERS, 4, 1, hb)); self.frames = []; self.headers = []
    def _pump(self, t=0.2):
        fr = self.c.read_frames(timeout=t)
        for f in fr:
            if f[0] == WU:
                inc = int.from_bytes(f[3][:4], "big")
                if f[2] == 0: self.cwin += inc
                else: self.swin += inc
            elif f[0] == SETTINGS and not f[1] & 1:
                for i in range(0, len(f[3]), 6):
                    k, v = struct.unpack(">HI", f[3][i:i + 6])
                    if k == 4: self.swin += v - 65535
            elif f[0] == HEADERS:
                try: self.headers.append(dict((k.decode() if isinstance(k, bytes) else k, v.decode() if isinstance(v, bytes) else v) for k, v in self.dec.decode(f[3])))
                except Exception as e: self.headers.append({"decode_err": str(e)})
            self.frames.append(f)
        return fr
    def send(self, data, end=True, deadline=30):
        i = 0; t0 = time.time()
        while i < len(data):
            n = min(16384, len(data) - i, self.cwin, self.swin)
            if n <= 0:
                self._pump(0.2)
                if any(f[0] in (RST, GOAWAY, "EOF", "EXC") for f in self.frames) or time.time() - t0 > deadline: return f"stopped at {i}"
                continue
            last = i + n >= len(data)
            self.c.send(frame(DATA, 1 if (last and end) else 0, 1, data[i:i + n])); i += n; self.cwin -= n; self.swin -= n
        if not data and end: self.c.send(frame(DATA, 1, 1, b""))
        return "sent"
    def result(self, timeout=None):
        end = time.time() + (timeout or self.timeout)
        while time.time() < end:
            self._pump(0.2)
            if any(f[0] == HEADERS and f[1] & 1 for f in self.frames) or any(f[0] in (RST, GOAWAY, "EOF", "EXC") for f in self.frames): break
        st = [h.get("grpc-status") for h in self.headers if "grpc-status" in h]
        msg = [h.get("grpc-message", "")[:100] for h in self.headers if "grpc-status" in h]
        odd = [(f[0], f[2], f[3][:12]) for f in self.frames if f[0] in (RST, GOAWAY, "EOF", "EXC")]
        data = b"".join(f[3] for f in self.frames if f[0] == DATA)
        self.c.close()
        return dict(status=st, msg=msg, odd=odd, resp=data[:60])
