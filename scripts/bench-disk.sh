#!/usr/bin/env bash
# Memory above flash, live: one synthetic CDN trace replayed through nginx's disk cache
# (proxy_cache, min_uses 1 and 2) and through `secondhit serve` with a flash tier (--disk-dir)
# whose policy is admit-all, second-hit or nth-hit:3, in one run, each in front of a fresh
# secondhit origin. Flash bytes written, set against the bytes served: for nginx, what its
# processes wrote to storage (/proc/<pid>/io write_bytes: its cache files; "reached the device"
# less cancelled_write_bytes, files deleted before the kernel wrote them back, which in a run
# this short is most of min_uses 1's); for secondhit, what foyer wrote to
# the device (secondhit_disk_device_write_bytes_total: blocks, page alignment, indexes). Not
# /proc/<pid>/io for both: it does not count secondhit's O_DIRECT overwrites of its block files
# (ext4 counts only the first, allocating write of each).
#
# usage: scripts/bench-disk.sh [REQUESTS] [CONCURRENCY]   (installs nginx from Debian if missing)
#   trace: `secondhit gen-trace` with 60 % of requests to objects asked once, Zipf 0.9 over
#   OBJECTS (20,000) others, log-normal sizes (median 8 KiB, sigma 1), seed 1.
#   Sizes: memory MEMORY_FRACTION (2 %) of the replayed working set, flash DISK_FRACTION (20 %);
#   nginx's max_size is the flash size. PROFILE=release builds quicker than the default
#   production (LTO) build. DISK_RUNS picks the runs (default "nginx:1 nginx:2
#   secondhit:admit-all secondhit:second-hit secondhit:nth-hit:3 default:second-hit").
set -euo pipefail
cd "$(dirname "$0")/.."
requests=${1:-200000}
concurrency=${2:-32}
objects=${OBJECTS:-20000}
memory_fraction=${MEMORY_FRACTION:-0.02}
disk_fraction=${DISK_FRACTION:-0.2}
profile=${PROFILE:-production}
# nginx (installed if missing) and nginx_cache_conf, the one peer configuration.
. scripts/bench-common.sh
cargo build --profile "$profile" --quiet
bin=target/$profile/secondhit
# On the disk the caches would use (not a tmpfs): the flash being measured.
dir=$(mktemp -d -p "${BENCH_DIR:-$PWD/target}" bench-disk.XXXXXX)
chmod 755 "$dir"
mkdir -p "$dir/logs"
cleanup() {
  kill $(cat "$dir"/*.pid 2>/dev/null) 2>/dev/null || true
  nginx -p "$dir" -c "$dir/nginx.conf" -s stop 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

trace=(--trace "$dir/synth.tr")
$bin gen-trace --out "$dir/synth.tr" --objects "$objects" --requests "$requests" --alpha 0.9 \
  --one-time-share 0.6 --sizes lognormal:8192:1.0 --seed 1 >/dev/null 2>&1
capacity() {
  $bin simulate "${trace[@]}" --policy admit-all --capacity-fraction "$1" --json - \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["capacity_bytes"])'
}
memory=$(capacity "$memory_fraction")
disk=$(capacity "$disk_fraction")
working_set=$(capacity 1)
echo "trace: gen-trace --objects $objects --requests $requests --alpha 0.9 --one-time-share 0.6 --sizes lognormal:8192:1.0 --seed 1"
echo "working set $(numfmt --to=iec "$working_set"); memory $(numfmt --to=iec "$memory") ($memory_fraction), flash $(numfmt --to=iec "$disk") ($disk_fraction); concurrency $concurrency; $(date -u +%F), $(nproc) cores"
echo

nginx_conf() { nginx_cache_conf "$dir/nginx.conf" "$dir" 18082 "$1" "$disk" "$dir/nginx.pid"; }

# Bytes written to flash so far: by foyer, or by a set of processes (field of /proc/<pid>/io; a
# process that has exited, such as nginx's cache loader, no longer counts).
written() {
  if [ "$1" = secondhit ]; then
    curl -s http://127.0.0.1:18093/metrics | awk '/^secondhit_disk_device_write_bytes_total /{print $2}'
    return
  fi
  local field=$1 total=0 p n
  shift
  for p in "$@"; do
    n=$(awk -v f="$field:" '$1 == f {print $2}' "/proc/$p/io" 2>/dev/null) || n=0
    total=$((total + ${n:-0}))
  done
  echo "$total"
}

# The most the flash held (nginx's cache files; secondhit's sealed blocks, each whole), sampled
# every 5 s (du over nginx's files costs CPU) until $dir/stop-sampling appears.
sample_held() {
  local most=0 now i
  while [ ! -e "$dir/stop-sampling" ]; do
    if [ "$1" = nginx ]; then
      now=$(du -sb "$dir/nginx-cache" 2>/dev/null | cut -f1) || true
    else
      now=$(curl -s http://127.0.0.1:18093/metrics | awk '/^secondhit_disk_bytes /{print $2}') || true
    fi
    if [ "${now:-0}" -gt "$most" ]; then most=$now; fi
    for i in 1 2 3 4 5; do [ -e "$dir/stop-sampling" ] || sleep 1; done
  done
  echo "$most" > "$dir/held"
}

# Waits (up to 10 s) until something answers on 127.0.0.1:$1.
wait_for() {
  local i
  for i in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$1/" && return 0
    sleep 0.1
  done
  echo "nothing answers on port $1" >&2
  return 1
}

# Stops a process this script started, and waits until it is gone (its ports free).
stop() {
  local pid
  pid=$(cat "$1")
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -f "$1"
}

printf '| cache | flash policy | hit ratio | byte hit ratio | origin offload | flash bytes written | of which reached the device | per byte served | flash held (most) | req/s | p99 ms | errors |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n'
notes=()
runs=${DISK_RUNS:-nginx:1 nginx:2 secondhit:admit-all secondhit:second-hit secondhit:nth-hit:3 default:second-hit}
for run in $runs; do
  cache=${run%%:*}
  policy=${run#*:}
  # The origin and each cache in a session of its own, as nginx's daemon is (the kernel's
  # autogroups share CPU between sessions first; see bench-proxy.sh).
  setsid $bin origin --listen 127.0.0.1:18081 --max-age 86400 2>/dev/null & echo $! > "$dir/origin.pid"
  wait_for 18081
  rm -rf "$dir/nginx-cache" "$dir/disk"
  if [ "$cache" = nginx ]; then
    nginx_conf "$policy"
    nginx -p "$dir" -c "$dir/nginx.conf"; port=18082
    wait_for 18082
    pids=$(pgrep -P "$(cat "$dir/nginx.pid")" | tr '\n' ' ')
    name="nginx $(nginx -v 2>&1 | sed 's|.*nginx/||') proxy_cache"
    label="min_uses $policy"
    meter=write_bytes
  else
    # Memory admits all (the flash policy alone decides what reaches flash), or the defaults.
    memory_policy=admit-all
    [ "$cache" = default ] && memory_policy=second-hit
    setsid $bin serve --origin http://127.0.0.1:18081 --listen 127.0.0.1:18083 --admin-listen 127.0.0.1:18093 \
      --capacity "$memory" --policy "$memory_policy" --disk-dir "$dir/disk" --disk-capacity "$disk" \
      --disk-policy "$policy" --log-level warn 2>/dev/null & echo $! > "$dir/serve.pid"; port=18083
    wait_for 18093
    pids=""
    name="secondhit serve, memory $memory_policy"
    label=$policy
    meter=secondhit
  fi
  # shellcheck disable=SC2086
  before=$(written "$meter" $pids)
  # shellcheck disable=SC2086
  cancelled_before=$(written cancelled_write_bytes $pids)
  rm -f "$dir/stop-sampling" "$dir/held"
  sample_held "$cache" & sampler=$!
  $bin replay "${trace[@]}" --target "http://127.0.0.1:$port" --concurrency "$concurrency" \
    --origin-stats http://127.0.0.1:18081/_stats --json "$dir/run.json" >/dev/null 2>&1
  # foyer writes what is queued within milliseconds; nginx's writes count when made.
  sleep 2
  # shellcheck disable=SC2086
  after=$(written "$meter" $pids)
  # shellcheck disable=SC2086
  cancelled=$(( $(written cancelled_write_bytes $pids) - cancelled_before ))
  touch "$dir/stop-sampling"; wait "$sampler"
  most=$(cat "$dir/held")
  if [ "$cache" = nginx ]; then
    notes+=("nginx min_uses $policy: its cache stood at up to $((most >> 20)) MiB during the run (max_size $((disk >> 20)) MiB: the cache manager removes files in the background); $((cancelled >> 20)) MiB of its writes were to files deleted before the kernel wrote them back")
  fi
  python3 - "$dir/run.json" "$name" "$label" "$((after - before))" "$cancelled" "$most" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
name, label = sys.argv[2], sys.argv[3]
wrote, cancelled, held = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
served = d["requested_bytes"]
reached = wrote - cancelled
print(f"| {name} | {label} | {d['hit_ratio']*100:.2f} % | {d['byte_hit_ratio']*100:.2f} % | "
      f"{d['origin_offload']*100:.2f} % | {wrote/2**20:,.0f} MiB | {reached/2**20:,.0f} MiB | "
      f"{wrote/served:.3f} | {held/2**20:,.0f} MiB | {d['requests_per_sec']:,.0f} | "
      f"{d['latency_ms']['p99']:.2f} | {d['errors']} |")
PY
  if [ "$cache" = nginx ]; then
    nginx -p "$dir" -c "$dir/nginx.conf" -s stop 2>/dev/null
    while [ -e "$dir/nginx.pid" ]; do sleep 0.1; done
  else
    curl -s http://127.0.0.1:18093/metrics | grep -E '^secondhit_disk_(writes|write_bytes|hits|refusals|evictions|dropped_writes)_total |^secondhit_disk_bytes ' \
      | tr '\n' ' ' > "$dir/$label-$cache.metrics"
    stop "$dir/serve.pid"
  fi
  stop "$dir/origin.pid"
done
echo
for n in "${notes[@]}"; do echo "$n"; done
echo
echo "secondhit's own counts (objects, not the process's storage writes):"
for f in "$dir"/*.metrics; do
  echo "  $(basename "$f" .metrics): $(cat "$f")"
done
echo
echo "prediction (secondhit simulate --store moka, memory admit-all, window inf; flash evicts objects FIFO, the live tier whole blocks):"
$bin simulate "${trace[@]}" --store moka --policy admit-all --capacity "$memory" --window inf \
  --disk-capacity "$disk" --disk-policy admit-all,second-hit,nth-hit:3
