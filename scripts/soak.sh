#!/usr/bin/env bash
# Bounded soak: many concurrent clients for SECONDS (default 60) through secondhit serve in front
# of a faulty secondhit origin (1 % 503s, 1 % resets mid-body, 1 % short bodies, 1 ms latency),
# with hits, misses and faults mixed. Checks: no corrupted body (every body is verified), no
# error the origin did not cause, resident memory under the cache capacity plus overhead and not
# growing after the warm-up. Not run in CI.
#
# usage: scripts/soak.sh [SECONDS] [CONCURRENCY]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
conc=${2:-64}
cargo build --release --quiet
bin=target/release/secondhit
out=target/soak
mkdir -p "$out"
[ -f "$out/trace.tr" ] || $bin gen-trace --out "$out/trace.tr" --requests 5000000 --objects 200000 \
  --alpha 0.9 --one-time-share 0.3 --sizes lognormal:8192:1.2 --seed 7 2>/dev/null
capacity=${CAPACITY:-128MiB}
$bin origin --listen 127.0.0.1:18281 --error-rate 0.01 --reset-rate 0.01 --short-rate 0.01 \
  --latency 1ms --max-age 86400 2>/dev/null & opid=$!
$bin serve --origin http://127.0.0.1:18281 --listen 127.0.0.1:18283 --admin-listen 127.0.0.1:18293 \
  --capacity $capacity --log-level error 2>"$out/serve.log" & spid=$!
trap 'kill $opid $spid 2>/dev/null || true' EXIT
sleep 1
: > "$out/rss.csv"
( while kill -0 $spid 2>/dev/null; do
    echo "$(date +%s),$(awk '/VmRSS/{print $2}' /proc/$spid/status)" >> "$out/rss.csv"; sleep 2
  done ) & mpid=$!
$bin replay --trace "$out/trace.tr" --target http://127.0.0.1:18283 --concurrency "$conc" \
  --duration "${secs}s" --origin-stats http://127.0.0.1:18281/_stats --json "$out/replay.json" >/dev/null 2>&1
kill $mpid 2>/dev/null || true
curl -s http://127.0.0.1:18293/metrics > "$out/metrics.txt"
python3 - "$out" "$capacity" "$conc" <<'PY'
import json, sys
out, cap = sys.argv[1], sys.argv[2]
d = json.load(open(f"{out}/replay.json"))
rss = [int(l.split(",")[1]) for l in open(f"{out}/rss.csv") if l.strip().split(",")[1:] != [""]]
half = rss[len(rss)//2:]
m = {l.split()[0]: l.split()[1] for l in open(f"{out}/metrics.txt") if l.startswith("secondhit_") and " " in l}
proxy_errors = {k: v for k, v in d["errors_by_kind"].items() if k not in ("status-503", "body")}
print(f"duration            {d['duration_secs']:.1f} s at concurrency {sys.argv[3]}")
print(f"requests            {d['requests']:,} ({d['requests_per_sec']:,.0f}/s)")
print(f"hit ratio           {d['hit_ratio']*100:.2f} % (X-Cache), origin offload {d['origin_offload']*100:.2f} %")
print(f"errors              {d['errors']:,} {d['errors_by_kind']}")
print(f"  not origin-caused {sum(proxy_errors.values())} {proxy_errors}")
print(f"corrupted bodies    {d['corrupted']}")
print(f"latency ms          p50 {d['latency_ms']['p50']:.2f}  p99 {d['latency_ms']['p99']:.2f}  p99.9 {d['latency_ms']['p999']:.2f}  max {d['latency_ms']['max']:.2f}")
print(f"cache               {int(float(m.get('secondhit_cache_bytes', 0)))/2**20:.1f} MiB in {m.get('secondhit_cache_entries')} entries (capacity {cap}); write aborts {m.get('secondhit_cache_write_aborts_total')}")
print(f"RSS MiB             max {max(rss)/1024:.1f}; second half min {min(half)/1024:.1f} max {max(half)/1024:.1f} (samples every 2 s: {len(rss)})")
ok = d["corrupted"] == 0 and not proxy_errors
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
