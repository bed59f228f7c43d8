#!/usr/bin/env bash
# Live trace replay through secondhit serve and through nginx proxy_cache with
# proxy_cache_min_uses 2, both in front of the same secondhit origin, same trace, same machine.
# Hit ratios come from X-Cache (both send it here) and, independently, from the origin's counters.
# A third run gives secondhit the space nginx's cache really took (nginx's cache manager evicts
# in the background and falls behind a saturating replay, with min_uses 2 as with 1, so its cache
# grows past max_size): the two caches compared on the same memory as well as the same setting.
#
# usage: scripts/replay-vs-nginx.sh [REQUESTS] [CONCURRENCY]   (installs nginx from Debian if missing)
#        SYNTH=1 scripts/replay-vs-nginx.sh 200000 64
#          a synthetic CDN mix instead of the bundled trace: `secondhit gen-trace` with 60 % of
#          requests to objects asked once, Zipf 0.9 over 20,000 others, log-normal sizes
#          (median 8 KiB, sigma 1.5), seed 1; concurrency 64 to saturate both caches
set -euo pipefail
cd "$(dirname "$0")/.."
requests=${1:-30000}
concurrency=${2:-8}
# nginx (installed if missing) and nginx_cache_conf, the one peer configuration.
. scripts/bench-common.sh
cargo build --profile production --quiet  # LTO: what to deploy (Cargo.toml)
bin=target/production/secondhit
dir=$(mktemp -d)
chmod 755 "$dir"
mkdir -p "$dir/logs"
trap 'kill $(cat "$dir"/*.pid 2>/dev/null) 2>/dev/null || true; nginx -p "$dir" -c "$dir/nginx.conf" -s stop 2>/dev/null || true; rm -rf "$dir"' EXIT

trace=()
if [ -n "${SYNTH:-}" ]; then
  $bin gen-trace --out "$dir/synth.tr" --objects 20000 --requests "$requests" --alpha 0.9 \
    --one-time-share 0.6 --sizes lognormal:8192:1.5 --seed 1 >/dev/null 2>&1
  trace=(--trace "$dir/synth.tr")
  echo "trace: gen-trace --objects 20000 --requests $requests --alpha 0.9 --one-time-share 0.6 --sizes lognormal:8192:1.5 --seed 1"
  echo
fi
# Cache size: 5 % of the replayed part's working set, the same for both.
ws=$($bin simulate "${trace[@]}" --limit "$requests" --policy admit-all --capacity-fraction 0.05 --json - \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["capacity_bytes"])')
nginx_cache_conf "$dir/nginx.conf" "$dir" 18082 2 "$ws" "$dir/nginx.pid"

printf '| cache | requests | hit ratio (X-Cache) | byte hit ratio | origin requests | origin offload | errors | corrupted | req/s | p50 ms | p99 ms |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n'
nginx_held=$ws
for cache in nginx secondhit secondhit-as-nginx; do
  # A fresh origin each time, so its counters start at 0. The origin and the cache each in a
  # session of its own, as nginx's daemon is: with the kernel's autogroups, CPU is shared fairly
  # between sessions first, and a cache in this script's session would share the replayer's.
  setsid $bin origin --listen 127.0.0.1:18081 --max-age 86400 2>/dev/null & echo $! > "$dir/origin.pid"
  if [ $cache = nginx ]; then
    rm -rf "$dir/nginx-cache"/*; nginx -p "$dir" -c "$dir/nginx.conf"; port=18082
  else
    # The third run (secondhit-as-nginx) gets the space nginx's cache really took.
    capacity=$ws; [ $cache = secondhit-as-nginx ] && capacity=$nginx_held
    setsid $bin serve --origin http://127.0.0.1:18081 --listen 127.0.0.1:18083 --admin-listen 127.0.0.1:18093 \
      --capacity "$capacity" --max-object-size "$ws" --log-level warn 2>/dev/null & echo $! > "$dir/serve.pid"; port=18083
  fi
  sleep 1
  $bin replay "${trace[@]}" --target "http://127.0.0.1:$port" --limit "$requests" --concurrency "$concurrency" \
    --origin-stats http://127.0.0.1:18081/_stats --json "$dir/$cache.json" >/dev/null 2>&1
  python3 - "$dir/$cache.json" "$cache" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
name = {"nginx": "nginx 1.22 proxy_cache, min_uses 2", "secondhit": "secondhit serve (second-hit)",
        "secondhit-as-nginx": "secondhit serve, capacity = what nginx held"}[sys.argv[2]]
print(f"| {name} | {d['requests']:,} | {d['hit_ratio']*100:.2f} % | {d['byte_hit_ratio']*100:.2f} % | {d['origin_requests']:,} | {d['origin_offload']*100:.2f} % | {d['errors']} | {d['corrupted']} | {d['requests_per_sec']:,.0f} | {d['latency_ms']['p50']:.2f} | {d['latency_ms']['p99']:.2f} |")
PY
  if [ $cache = nginx ]; then
    # nginx's cache manager evicts in the background: the cache may stand above max_size.
    held=$(du -sb "$dir/nginx-cache" | cut -f1); nginx_held=$held
    nginx_note="nginx's cache held $(numfmt --to=iec "$held") on disk at the end, max_size $(numfmt --to=iec "$ws")"
    nginx -p "$dir" -c "$dir/nginx.conf" -s stop; sleep 0.5
  else
    m=$(curl -s http://127.0.0.1:18093/metrics)
    held=$(echo "$m" | awk '/^secondhit_cache_bytes /{print $2}')
    [ $cache = secondhit ] && serve_note="secondhit held $(numfmt --to=iec "${held%.*}") (cache_bytes: keys, headers, bodies, bookkeeping) at the end, capacity $(numfmt --to=iec "$ws")"
    kill "$(cat "$dir/serve.pid")"
  fi
  kill "$(cat "$dir/origin.pid")"; sleep 0.5
done
echo
echo "$nginx_note; $serve_note"
echo
echo "prediction (secondhit simulate --limit $requests --capacity $ws, second-hit, window inf):"
$bin simulate "${trace[@]}" --limit "$requests" --policy second-hit --capacity "$ws" --window inf --store moka | sed -n '4,5p'
