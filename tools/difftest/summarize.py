import json, glob, collections
for f in sorted(glob.glob("results_*.jsonl")):
    rows = [json.loads(l) for l in open(f) if l.strip()]
    if not rows: continue
    agg = collections.Counter()
    for r in rows:
        for k, v in r.items():
            if isinstance(v, (int, float)) and k not in ("seed",): agg[k] += v
    bad = [r["seed"] for r in rows if r["dishonest"] or r["needless"] or r["missed_refute"] or r["cx_final_not_in_check"] or r["cx_check_missing_in_serve_clean"] or r["cx_withdrawn_final"] or r["cx_withdrawn_in_check"]]
    print(f.split("results_")[1][:-6], "seeds", len(rows), "final", agg["final"], "dishonest", agg["dishonest"], "needless", agg["needless"], "missed_refute", agg["missed_refute"], "late_unknown", agg["late_unknown"],
          "| cx check", agg["cx_check"], "serve final", agg["cx_serve_final"], "prov", agg["cx_serve_prov"], "wd", agg["cx_serve_withdrawn"], "final∉check", agg["cx_final_not_in_check"], "prov∉check", agg["cx_prov_not_in_check"], "wd∈check", agg["cx_withdrawn_in_check"], "check-missing(clean)", agg["cx_check_missing_in_serve_clean"], "refuted-without-cx", sum(len(r.get("refuted_without_cx", [])) for r in rows), "bad seeds", bad)
