#!/usr/bin/env bash
# What exact moka maintenance costs: the same build of `secondhit serve` with
# `cache.exact_maintenance = true` (the default: moka maintained after every write and every 32
# reads, as `simulate --store moka` does, so the simulator predicts its evictions) and `false`
# (moka maintains itself when its buffers fill or its 300 ms timer fires), in one run, in front
# of `secondhit origin`, loaded by `secondhit replay` of the bundled web trace at CONCURRENCY (32):
#
#   write  admit-all in 4 MiB: three requests in four miss, and nearly every miss is written and
#          evicts (the path that maintains after every write)
#   hit    admit-all in 1 GiB: the first 20,000 requests once to fill it, then the same 20,000
#          measured, every one a hit (the path that maintains every 32 reads)
#
# Every path runs ROUNDS times (default 3), the two settings alternating which goes first; the
# table gives each round and the medians, with CPU per request (the proxy's user+system time over
# the measured replay / its requests) and the ratio of exact to moka's own.
#
# usage: scripts/bench-maintenance.sh   (PROFILE=release builds quicker than production)
set -euo pipefail
cd "$(dirname "$0")/.."
concurrency=${CONCURRENCY:-32}
rounds=${ROUNDS:-3}
profile=${PROFILE:-production}
cargo build --profile "$profile" --quiet
bin=target/$profile/secondhit
dir=$(mktemp -d -p "${BENCH_DIR:-$PWD/target}" bench-maintenance.XXXXXX)
cleanup() {
  kill $(cat "$dir"/*.pid 2>/dev/null) 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
origin_port=18191 proxy_port=18190 admin_port=18192
"$bin" origin --listen 127.0.0.1:$origin_port --max-age 86400 >"$dir/origin.log" 2>&1 &
echo $! >"$dir/origin.pid"
printf '[cache]\nexact_maintenance = true\n' >"$dir/exact.toml"
printf '[cache]\nexact_maintenance = false\n' >"$dir/moka.toml"

# cpu_ticks PID: user+system clock ticks of the process.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# run SETTING PATH: one measured replay; prints "req/s cpu-us-a-request hit-ratio".
run() {
  local setting=$1 path=$2 capacity limit
  case $path in
    write) capacity=4MiB limit=0 ;;
    hit) capacity=1GiB limit=20000 ;;
  esac
  "$bin" serve --config "$dir/$setting.toml" --listen 127.0.0.1:$proxy_port \
    --admin-listen 127.0.0.1:$admin_port --origin http://127.0.0.1:$origin_port \
    --policy admit-all --capacity $capacity --max-object-size 4MiB --log-level warn \
    >"$dir/serve.log" 2>&1 &
  local pid=$!
  echo $pid >"$dir/serve.pid"
  for _ in $(seq 50); do
    curl -fs "http://127.0.0.1:$admin_port/metrics" >/dev/null 2>&1 && break
    sleep 0.1
  done
  local lim=()
  if [ "$limit" -gt 0 ]; then
    lim=(--limit "$limit")
    "$bin" replay --target http://127.0.0.1:$proxy_port --concurrency "$concurrency" \
      "${lim[@]}" --json "$dir/warm.json" >/dev/null 2>&1
  fi
  local t0 t1
  t0=$(cpu_ticks $pid)
  "$bin" replay --target http://127.0.0.1:$proxy_port --concurrency "$concurrency" \
    "${lim[@]}" --json "$dir/run.json" >/dev/null 2>&1
  t1=$(cpu_ticks $pid)
  kill $pid
  wait $pid 2>/dev/null || true
  python3 - "$dir/run.json" "$t0" "$t1" "$hz" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
ticks = float(sys.argv[3]) - float(sys.argv[2])
us = ticks / float(sys.argv[4]) * 1e6 / max(r["requests"], 1)
print(f'{r["requests_per_sec"]:.0f} {us:.1f} {r["hit_ratio"] * 100:.2f} {r["errors"]}')
EOF
}

echo "Exact moka maintenance (cache.exact_maintenance = true, the default) against moka's own (false): $bin, bundled trace, secondhit replay --concurrency $concurrency, $rounds rounds."
echo
echo "| path | round | maintenance | requests/s | CPU us/request | hit ratio | errors |"
echo "|---|---:|---|---:|---:|---:|---:|"
results="$dir/results"
: >"$results"
for path in write hit; do
  for round in $(seq "$rounds"); do
    if [ $((round % 2)) -eq 1 ]; then order="exact moka"; else order="moka exact"; fi
    for setting in $order; do
      read -r rate cpu hit errors < <(run "$setting" "$path")
      echo "| $path | $round | $setting | $rate | $cpu | $hit % | $errors |"
      echo "$path $setting $rate $cpu" >>"$results"
    done
  done
done
echo
echo "Medians of the rounds (exact / moka's own: below 1 is cheaper for CPU):"
echo
echo "| path | exact requests/s | moka's own requests/s | exact CPU us/request | moka's own CPU us/request | CPU exact / own |"
echo "|---|---:|---:|---:|---:|---:|"
python3 - "$results" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for path in ("write", "hit"):
    def med(setting, i):
        return statistics.median(float(r[i]) for r in rows if r[0] == path and r[1] == setting)
    er, mr, ec, mc = med("exact", 2), med("moka", 2), med("exact", 3), med("moka", 3)
    print(f"| {path} | {er:.0f} | {mr:.0f} | {ec:.1f} | {mc:.1f} | {ec / mc:.2f} |")
EOF
