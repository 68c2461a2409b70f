#!/usr/bin/env python3
"""`serve` at millions of idle scopes (issue 16, SPEC §7 "Memory"): peak and settled resident
memory while ingesting and restoring, `fencewatch_state_bytes` against RSS, restart to ready.

    python3 tools/scale_bench.py [--bin target/release/fencewatch] [--scopes 10000000]
        [--dir bench-data/scale] [--restarts 3] [--check-events 2000000] [--keep]

Writes an NDJSON file of one commit for each of SCOPES scopes (16-byte ids `order-%010d`,
one incarnation, no grants, 10 ms apart, so the watermark moves as a running service's does
and everything older than the horizon folds into the scopes' marks), runs
`serve --ingest-file` on it into a fresh data directory (defaults otherwise: archive on,
checkpoints every 10 s), sampling /proc/PID/status (VmHWM, VmRSS) until every scope is
resident and a checkpoint covers them all, then stops it (SIGTERM) and restarts it RESTARTS
times on the same data directory, each time with `fencewatch check` of the first CHECK_EVENTS
lines running beside it in a loop (the other core busy), timing start to /readyz 200.
Prints one line per phase and a summary; deletes the data directory unless --keep (the event
file stays for the next run).
"""

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request

CONTRACT = """[[property]]
name = "order-mutation"
subject = "Order"
strategy = "lease_epoch"
window = "1m"
clock_skew = "50ms"
allowed_lateness = "10s"
  [[property.route]]
  name = "orders-api.transition"
"""
BASE_NS = 1_764_417_600_000_000_000
STEP_NS = 10_000_000


def write_events(path, n, limit=None):
    """One commit per scope, 10 ms apart (unless the file is already there)."""
    if os.path.exists(path):
        return
    tmp = path + ".tmp"
    with open(tmp, "wb") as out:
        buf = []
        for i in range(n if limit is None else min(n, limit)):
            buf.append(
                b'{"kind":"commit","scope":"order-%010d","route":"orders-api.transition",'
                b'"ts":%d,"epoch":%d,"holder":"a"}\n' % (i, BASE_NS + i * STEP_NS, 1 + i % 7)
            )
            if len(buf) >= 100_000:
                out.write(b"".join(buf))
                buf = []
        out.write(b"".join(buf))
    os.rename(tmp, path)


def status(pid):
    """VmHWM and VmRSS of `pid` in bytes."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                out[key] = int(rest.split()[0]) * 1024
    return out


def metrics(url):
    """The unlabelled gauges and counters of /metrics, by name."""
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or "{" in line:
            continue
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = float(parts[1])
            except ValueError:
                pass
    return out


def ready(url):
    try:
        with urllib.request.urlopen(url + "/readyz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def gib(b):
    return f"{b / (1 << 30):.2f} GiB"


def serve(args, data, events, contract, listen):
    cmd = [
        args.bin, "serve", "--contract", contract, "--data-dir", data,
        "--listen", listen, "--ingest-file", events,
    ]
    log = open(os.path.join(args.dir, "serve.log"), "ab")
    return subprocess.Popen(cmd, stdout=log, stderr=log)


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def settle(proc, url, n, deadline_s):
    """Samples until all `n` scopes are resident and a checkpoint covers every event; returns
    the last sample's status and metrics."""
    t0 = time.monotonic()
    while True:
        if proc.poll() is not None:
            sys.exit(f"serve exited with {proc.returncode} (see {url} log)")
        m = metrics(url)
        s = status(proc.pid)
        if (
            m.get("fencewatch_active_scopes", 0) >= n
            and m.get("fencewatch_checkpoint_offset", 0) >= n
        ):
            return s, m, time.monotonic() - t0
        if time.monotonic() - t0 > deadline_s:
            sys.exit(f"not settled after {deadline_s} s: {m.get('fencewatch_active_scopes')} scopes")
        time.sleep(0.5)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", default="target/release/fencewatch")
    p.add_argument("--scopes", type=int, default=10_000_000)
    p.add_argument("--dir", default="bench-data/scale")
    p.add_argument("--restarts", type=int, default=3)
    p.add_argument("--check-events", type=int, default=2_000_000)
    p.add_argument("--listen", default="127.0.0.1:18473")
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    n = args.scopes
    events = os.path.join(args.dir, f"idle-{n}.ndjson")
    beside = os.path.join(args.dir, f"check-{args.check_events}.ndjson")
    contract = os.path.join(args.dir, "contract.toml")
    with open(contract, "w") as f:
        f.write(CONTRACT)
    write_events(events, n)
    write_events(beside, n, args.check_events)
    data = os.path.join(args.dir, "data")
    subprocess.run(["rm", "-rf", data], check=True)
    url = "http://" + args.listen

    proc = serve(args, data, events, contract, args.listen)
    s, m, took = settle(proc, url, n, 3600)
    state = m.get("fencewatch_state_bytes", 0)
    print(
        f"ingest: {n} scopes in {took:.0f} s, VmHWM {gib(s['VmHWM'])}, VmRSS {gib(s['VmRSS'])}, "
        f"state_bytes {gib(state)} ({state / n:.1f} B/scope, {state / s['VmRSS']:.2f} of RSS)",
        flush=True,
    )
    stop(proc)

    rows = []
    for i in range(args.restarts):
        check = subprocess.Popen(
            ["sh", "-c", f'while :; do "{args.bin}" check --contract "{contract}" "{beside}" >/dev/null; done'],
            start_new_session=True,
        )
        time.sleep(1)
        t0 = time.monotonic()
        proc = serve(args, data, events, contract, args.listen)
        hwm_ready = 0
        while not ready(url):
            if proc.poll() is not None:
                sys.exit(f"serve exited with {proc.returncode}")
            hwm_ready = status(proc.pid)["VmHWM"]
            time.sleep(0.05)
        to_ready = time.monotonic() - t0
        os.killpg(check.pid, signal.SIGTERM)
        check.wait()
        time.sleep(3)
        s = status(proc.pid)
        m = metrics(url)
        state = m.get("fencewatch_state_bytes", 0)
        rows.append((to_ready, s["VmHWM"], s["VmRSS"], state))
        print(
            f"restart {i + 1}: ready in {to_ready:.1f} s with check beside, "
            f"VmHWM {gib(max(hwm_ready, s['VmHWM']))}, VmRSS {gib(s['VmRSS'])}, "
            f"state_bytes {gib(state)} ({state / n:.1f} B/scope, {state / s['VmRSS']:.2f} of RSS), "
            f"{int(m.get('fencewatch_active_scopes', 0))} scopes",
            flush=True,
        )
        stop(proc)
    if rows:
        print(
            f"worst restart: {max(r[0] for r in rows):.1f} s, restore VmHWM {gib(max(r[1] for r in rows))}"
        )
    if not args.keep:
        subprocess.run(["rm", "-rf", data], check=True)


if __name__ == "__main__":
    main()
