#!/usr/bin/env bash
# The admission x eviction matrix the README shows: admit-all and second-hit in front of every
# exact eviction, at 1 % and 10 % of the working set, on the four real traces and a synthetic
# CDN trace (60 % of requests to one-time objects, Zipf 0.9, log-normal sizes); second-hit with
# serve's default window (1 h) and its filter sized for the trace (--expected-items auto). Prints markdown.
#
# usage: scripts/matrix.sh            (needs ../shared/traces for two of the real traces)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/secondhit
out=target/matrix
mkdir -p "$out"
cdn=$out/cdn-2M.oracleGeneral.bin
[ -f "$cdn" ] || $bin gen-trace --out "$cdn" --requests 2000000 --objects 200000 --alpha 0.9 \
  --one-time-share 0.6 --sizes lognormal:16384:1.5 --seed 11 2>/dev/null
traces=(traces/request.trace.xz traces/trace-mt-20130703.trc.bin.gz)
for t in ../shared/traces/cloud_photos-sample.bz2 ../shared/traces/cloudPhysicsIO.oracleGeneral.bin; do
  [ -f "$t" ] && traces+=("$t")
done
traces+=("$cdn")
for t in "${traces[@]}"; do
  $bin simulate --trace "$t" --policy admit-all,second-hit --eviction all --expected-items auto \
    --capacity-fraction 0.01,0.1 --json "$out/$(basename "$t").json" >/dev/null
done
python3 - "$out" "${traces[@]}" <<'PY'
import json, os, sys
out, traces = sys.argv[1], sys.argv[2:]
for t in traces:
    r = json.load(open(os.path.join(out, os.path.basename(t) + ".json")))
    print(f"\n**{os.path.basename(t)}** ({r['requests']:,} requests, "
          f"{r['one_hit_wonder_ratio']*100:.1f} % one-hit wonders)\n")
    print("| eviction | 1 %: admit-all | second-hit | its writes | 10 %: admit-all | second-hit | its writes |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    by = {(x["eviction"], x["policy"], x["capacity_fraction"]): x for x in r["results"]}
    for ev in dict.fromkeys(x["eviction"] for x in r["results"]):
        cells = []
        for f in (0.01, 0.1):
            a, s = by[(ev, "admit-all", f)], by[(ev, "second-hit", f)]
            w = (s["admissions"] / a["admissions"] - 1) * 100 if a["admissions"] else 0
            cells += [f"{a['hit_ratio']*100:.2f} %", f"{s['hit_ratio']*100:.2f} %", f"{w:+.0f} %"]
        print(f"| {ev} | " + " | ".join(cells) + " |")
    for a in r["answers"]:
        best = a["best_hit_ratio"]
        print(f"\nbest at {a['capacity_bytes']:,} B: {best['policy']} x {best['eviction']} "
              f"{best['value']*100:.2f} %; belady {a['belady_hit_ratio']*100:.2f} %", end="")
    print()
PY
