import sys, json, subprocess, time, os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import diff
d, contract, fname = sys.argv[1], sys.argv[2], sys.argv[3]
lines = [l for l in open(f"{d}/{fname}").read().splitlines() if l.strip()]
p, port = diff.run_serve(d, contract, fname, len(lines))
print(port, p.pid, flush=True)
open(f"{d}/serve.port","w").write(f"{port} {p.pid}\n")
