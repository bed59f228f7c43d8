#!/usr/bin/env bash
# The lab against the deployed edge: `secondhit serve` with production settings (production
# weights, moka maintained as deployed) replayed at concurrency 1 on loopback, beside what
# `secondhit simulate` predicts for it with and without what it knows of serve. Hit ratios are
# the figures; the machine's speed does not enter them.
#
#   sizing     the bundled trace through serve --policy second-hit --window 1000h --capacity
#              15210678 --max-object-size 4MiB; simulate --store moka, without and with
#              --object-cost serve
#   recording  the first 20,000 requests while `secondhit origin --error-rate 0.1 --max-age 1`
#              answers (one in ten a 503, every object stale after a second), recorded in
#              secondhit's format and, in a second run, as oracleGeneral; each recording
#              simulated
#   two tiers  the first 20,000 requests through memory 4.2 MiB above flash 24 MiB in 1 MiB
#              blocks (admit-all on both); simulate --object-cost serve, flash evicting object
#              by object and whole blocks (--disk-block-size)
#
# usage: scripts/bench-predict.sh   (PROFILE=release builds quicker than production)
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${PROFILE:-production}
cargo build --profile "$profile" --quiet
bin=$PWD/target/$profile/secondhit
dir=$(mktemp -d -p "${BENCH_DIR:-$PWD/target}" bench-predict.XXXXXX)
cleanup() {
  kill $(cat "$dir"/*.pid 2>/dev/null) 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
origin_port=18291 proxy_port=18290 admin_port=18292

origin() {
  "$bin" origin --listen 127.0.0.1:$origin_port "$@" >"$dir/origin.log" 2>&1 &
  echo $! >"$dir/origin.pid"
}
serve() {
  "$bin" serve --listen 127.0.0.1:$proxy_port --admin-listen 127.0.0.1:$admin_port \
    --origin http://127.0.0.1:$origin_port --log-level warn "$@" >"$dir/serve.log" 2>&1 &
  echo $! >"$dir/serve.pid"
  for _ in $(seq 50); do
    curl -fs "http://127.0.0.1:$admin_port/metrics" >/dev/null 2>&1 && return
    sleep 0.1
  done
}
stop() {
  for p in serve origin; do
    if [ -f "$dir/$p.pid" ]; then
      kill "$(cat "$dir/$p.pid")" 2>/dev/null || true
      wait "$(cat "$dir/$p.pid")" 2>/dev/null || true
      rm -f "$dir/$p.pid"
    fi
  done
}
# replay [ARGS]: the live hit ratio in per cent.
replay() {
  "$bin" replay --target http://127.0.0.1:$proxy_port --concurrency 1 --json "$dir/r.json" "$@" >/dev/null 2>&1
  python3 -c "import json; print('%.2f' % (json.load(open('$dir/r.json'))['hit_ratio'] * 100))"
}
writes() { curl -fs "http://127.0.0.1:$admin_port/metrics" | awk '/^secondhit_cache_writes_total /{print $2}'; }
# simulate ARGS: the first run's hit ratio in per cent and its writes.
simulate() {
  "$bin" simulate --no-decompose --json "$dir/s.json" "$@" >/dev/null 2>&1
  python3 -c "import json; r = json.load(open('$dir/s.json'))['results'][0]; print('%.2f %d' % (r['hit_ratio'] * 100, r['admissions']))"
}

echo "secondhit serve with production settings against simulate's prediction, $bin, concurrency 1."
echo
echo "| case | live hit ratio | live writes | prediction | predicted hit ratio | predicted writes | points off |"
echo "|---|---:|---:|---|---:|---:|---:|"
row() { # case live writes prediction predicted pwrites
  printf "| %s | %s %% | %s | %s | %s %% | %s | %+.2f |\n" "$1" "$2" "$3" "$4" "$5" "$6" \
    "$(python3 -c "print($5 - $2)")"
}

# sizing
origin --max-age 86400
serve --policy second-hit --window 1000h --capacity 15210678 --max-object-size 4MiB
live=$(replay)
w=$(writes)
stop
sim=(--store moka --policy second-hit --window 1000h --capacity 15210678)
read -r p pw < <(simulate "${sim[@]}")
row "sizing: bundled trace, 14.5 MiB" "$live" "$w" "simulate (objects weigh their size)" "$p" "$pw"
read -r p pw < <(simulate "${sim[@]}" --object-cost serve)
row "sizing: bundled trace, 14.5 MiB" "$live" "$w" "simulate --object-cost serve" "$p" "$pw"

# recording
for format in secondhit oracle-general; do
  origin --error-rate 0.1 --max-age 1
  serve --policy second-hit --window 1000h --capacity 15210678 --record "$dir/edge.$format" --record-format $format
  live=$(replay --limit 20000)
  w=$(writes)
  stop
  read -r p pw < <(simulate --trace "$dir/edge.$format" --format "$([ $format = secondhit ] && echo secondhit-recording || echo oracle-general)" "${sim[@]}")
  row "recording: 10 % errors, max-age 1 s" "$live" "$w" "simulate the $format recording" "$p" "$pw"
done

# two tiers
printf '[cache.disk]\ndir = "%s"\ncapacity = "24MiB"\nblock_size = "1MiB"\n[admission]\ndisk = "admit-all"\n' "$dir/flash" >"$dir/two.toml"
origin --max-age 86400
serve --config "$dir/two.toml" --policy admit-all --window inf --capacity 4423680 --max-object-size 4MiB
live=$(replay --limit 20000)
w=$(writes)
stop
two=(--store moka --policy admit-all --window inf --capacity 4423680 --disk-capacity 24MiB --disk-policy admit-all --limit 20000 --object-cost serve)
read -r p pw < <(simulate "${two[@]}")
row "two tiers: flash 24 MiB, 1 MiB blocks" "$live" "$w" "simulate, flash object by object" "$p" "$pw"
read -r p pw < <(simulate "${two[@]}" --disk-block-size 1MiB)
row "two tiers: flash 24 MiB, 1 MiB blocks" "$live" "$w" "simulate --disk-block-size 1MiB" "$p" "$pw"
echo
echo "Writes: objects written to memory (secondhit_cache_writes_total against the run's admissions);"
echo "with two tiers the prediction's also count the flash hits promoted to memory, which serve does"
echo "not count as writes. Points off: predicted hit ratio less live."
