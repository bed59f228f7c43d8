#!/usr/bin/env bash
# When does second-hit pay? For each trace: how soon second requests follow first ones
# (`trace-stats`), and second-hit against admit-all in an LRU of 1 % and 10 % of the working set,
# decomposed request by request (`simulate`: hits lost, of those lost to deferral, and gained).
# The peer is admit-all itself, stepped beside second-hit over the same requests.
#
# usage: scripts/bench-pays.sh     (needs: cargo, python3; the shared traces when present)
#        SYNTH_REQUESTS=2000000 picks the synthetic traces' length
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/bench-pays
mkdir -p "$out"
cargo build --release --quiet
bin=target/release/secondhit
n=${SYNTH_REQUESTS:-2000000}

# Two synthetic CDN traces of the same popularity (Zipf 0.9 over n/10 objects, log-normal sizes
# around 32 KiB): one where half of the requests are for objects requested once, as on an edge
# with a long tail; one where almost every object comes back, soon after its first request.
tail=$out/cdn-tail-$n.oracleGeneral.bin
hot=$out/cdn-hot-$n.oracleGeneral.bin
[ -f "$tail" ] || $bin gen-trace --out "$tail" --requests "$n" --objects $((n / 10)) \
  --alpha 0.9 --one-time-share 0.5 --sizes lognormal:32768:1.5 --seed 7 2>/dev/null
[ -f "$hot" ] || $bin gen-trace --out "$hot" --requests "$n" --objects $((n / 100)) \
  --alpha 0.9 --one-time-share 0.05 --sizes lognormal:32768:1.5 --seed 7 2>/dev/null

traces=(traces/request.trace.xz traces/trace-mt-20130703.trc.bin.gz)
for f in cloud_photos-sample.bz2 cloudPhysicsIO.oracleGeneral.bin; do
  if [ -f "../shared/traces/$f" ]; then traces+=("../shared/traces/$f"); else echo "skipped: ../shared/traces/$f is not here"; fi
done
traces+=("$tail" "$hot")

for t in "${traces[@]}"; do
  name=$(basename "$t")
  $bin trace-stats "$t" --json > "$out/$name.stats.json"
  $bin simulate --trace "$t" --policy admit-all,second-hit --capacity-fraction 0.01,0.1 \
    --expected-items auto --json "$out/$name.sim.json" > /dev/null
done

python3 - "$out" "${traces[@]}" <<'PY'
import json, os, sys
out, traces = sys.argv[1], sys.argv[2:]
def size(b, sizeless):
    if sizeless:
        return f"{b:,} obj"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale:
            return f"{b / scale:.1f} {unit}"
    return f"{b} B"
print("How soon second requests come (trace-stats: first to second request of each object "
      "requested twice or more; the LRU distance is the smallest admit-all LRU that serves it):")
print()
print("| trace | requests | one-hit wonders | second requests | p50 requests | p50 LRU distance "
      "| p90 LRU distance | within 1h |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for t in traces:
    name = os.path.basename(t)
    s = json.load(open(f"{out}/{name}.stats.json"))
    d = s["second_request_distance"]
    sl = s["requested_bytes"] == s["requests"]
    hour = next(w["share"] for w in d["within_window"] if w["window"] == "1h")
    print(f"| {name} | {s['requests']:,} | {s['one_hit_wonder_ratio'] * 100:.1f} % "
          f"| {d['second_requests']:,} | {d['requests']['p50']:,} | {size(d['bytes']['p50'], sl)} "
          f"| {size(d['bytes']['p90'], sl)} | {hour * 100:.1f} % |")
print()
print("Second-hit against admit-all, LRU (simulate; hit ratios in %; lost: admit-all's hits "
      "second-hit missed, deferred: of those, objects it had deferred; gained: its hits admit-all "
      "missed; bound: the second requests an admit-all LRU of that size serves, from trace-stats):")
print()
print("| trace | cache | admit-all | second-hit | net pp | bound | lost | deferred | gained "
      "| writes vs admit-all |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for t in traces:
    name = os.path.basename(t)
    s = json.load(open(f"{out}/{name}.stats.json"))
    sim = json.load(open(f"{out}/{name}.sim.json"))
    sl = s["requested_bytes"] == s["requests"]
    bounds = {b["capacity_bytes"]: b["second_requests_served"]
              for b in s["second_request_distance"]["lru_bound"]}
    base = {r["capacity_bytes"]: r for r in sim["results"] if r["policy"] == "admit-all"}
    for r in sim["results"]:
        if r["policy"] != "second-hit":
            continue
        b = base[r["capacity_bytes"]]
        net = (r["hit_ratio"] - b["hit_ratio"]) * 100
        writes = (r["admissions"] / b["admissions"] - 1) * 100 if b["admissions"] else 0
        cap = f"{size(r['capacity_bytes'], sl)} ({r['capacity_fraction'] * 100:g} %)"
        print(f"| {name} | {cap} | {b['hit_ratio'] * 100:.2f} | {r['hit_ratio'] * 100:.2f} "
              f"| {net:+.2f} | {bounds.get(r['capacity_bytes'], 0):,} | {r['hits_lost']:,} "
              f"| {r['hits_lost_deferred']:,} | {r['hits_gained']:,} | {writes:+.1f} % |")
PY
