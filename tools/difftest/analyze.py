#!/usr/bin/env python3
"""Classify serve-final counterexamples that check lacks. usage: analyze.py RUNDIR..."""
import json, os, sys, re, signal, collections
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import diff

def classify(d):
    c = open(f"{d}/contract.toml").read()
    lat = diff.dur_ns(re.search(r'allowed_lateness = "([^"]*)"', c).group(1))
    lines = [l for l in open(f"{d}/mut.ndjson").read().splitlines() if l.strip()]
    evs = [json.loads(l) for l in lines]
    # ideal horizon before each line (1-based line n): max ts of lines < n minus 2*lat
    H = [None] * (len(lines) + 2); mx = None
    for n, e in enumerate(evs, 1):
        H[n] = None if mx is None else mx - 2 * lat
        mx = e["ts"] if mx is None else max(mx, e["ts"])
    H[len(lines) + 1] = mx - 2 * lat
    bykey = collections.defaultdict(list)
    for n, e in enumerate(evs, 1):
        if e.get("emitter") is not None and e.get("seq") is not None:
            bykey[(e["emitter"], e["seq"])].append(n)
    def partners(n):
        e = evs[n - 1]
        return [m for m in bykey.get((e.get("emitter"), e.get("seq")), []) if m != n and lines[m - 1] != lines[n - 1]]
    def final_line(ts):
        for n in range(1, len(lines) + 2):
            if H[n] is not None and H[n] >= ts:
                return n
        return None
    _, cw, cids = diff.run_check(d, "contract.toml", "mut.ndjson")
    p, port = diff.run_serve(d, "contract.toml", "mut.ndjson", len(lines))
    try:
        _, sw, scx = diff.serve_results(port, 10**9, min(e["ts"] for e in evs) - 10**10, mx + 10**10)
    finally:
        p.send_signal(signal.SIGTERM); p.wait()
    cats = collections.Counter(); ex = {}
    for i, x in scx.items():
        if not x.get("final") or x.get("withdrawn") or i in cids:
            continue
        src = x["stale"]["source"]; ls = int(src.split(":")[1])
        sup = x.get("superseding") or {}
        lw = int(sup["source"].split(":")[1]) if sup.get("source", "").startswith("mut.ndjson:") else None
        ps = partners(ls); pw = partners(lw) if lw else []
        # The folded mark as witness: its epoch's earliest event, the delivery it rested on
        # (the superseding view carries the mark's epoch and earliest time). Only committed
        # commits and fences fold into a mark (a grant at the same time does not).
        through_mark = lw is None and sup.get("epoch") is not None and sup.get("ts")
        if through_mark:
            at = diff.parse_iso(sup["ts"])
            for n, e in enumerate(evs, 1):
                if (e.get("scope") == x["scope"] and e.get("epoch") == sup["epoch"] and e["ts"] == at
                        and e["kind"] in ("commit", "fence") and e.get("outcome") != "rejected"):
                    pw += partners(n)
        stale_late = H[ls] is not None and evs[ls - 1]["ts"] < H[ls]
        fin = final_line(max(evs[ls - 1]["ts"], evs[lw - 1]["ts"] if lw else evs[ls - 1]["ts"]))
        allp = ps + pw
        mark = "(through the folded mark)" if through_mark else ""
        if not allp:
            cat = "no_conflict_on_stale_or_witness" + ("(witness=folded mark)" if lw is None else "")
        elif stale_late and all(m > ls for m in allp):
            cat = "stale_event_late_final_at_birth_partner_later" + mark
        elif fin is not None and all(m >= fin for m in allp):
            cat = "partner_arrived_after_cx_final(inherent)" + mark
        else:
            cat = "partner_arrived_while_provisional(BUG?)" + mark
        cats[cat] += 1
        ex.setdefault(cat, (i, ls, lw, ps, pw, fin))
    return cats, ex

if __name__ == "__main__":
    tot = collections.Counter()
    for d in sys.argv[1:]:
        cats, ex = classify(d)
        tot.update(cats)
        print(d, dict(cats), {k: v for k, v in ex.items()}, flush=True)
    print("TOTAL", dict(tot))
