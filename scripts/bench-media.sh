#!/usr/bin/env bash
# Large objects in slices, live: one media trace (`gen-trace --media`: objects of 20 MiB to
# 2 GiB, log-normal; requests are ranges of 1 to 8 MiB starting nearer the beginning; most
# objects requested once) replayed through nginx (`slice 1m`, proxy_cache on disk,
# proxy_cache_min_uses 2) and through `secondhit serve --slice-size 1MiB` with a flash tier,
# at the same budgets (nginx: max_size = the flash size; secondhit: MEMORY of memory above the
# same flash size), each in front of a fresh `secondhit origin`, in one run: once with flash
# enough for every slice stored twice (DISKS' first size) and once under pressure (its second).
# nginx's max_size is a target its cache manager trims towards, not a bound: under pressure it
# held 43 % more than max_size. So one secondhit run also gets the flash nginx held at most in
# its run (`matched`): the same disk, as used.
#
# Figures per cache: the bytes the origin sent (its own /_stats); the byte hit ratio over the
# slices the requests cover (both caches fetch the same aligned 1 MiB slices, so the bytes
# they look up are the same: 1 - origin bytes / those bytes, the same measure for both, as
# nginx's X-Cache names only the first slice of a response); flash bytes written (nginx: what its
# processes wrote to storage, /proc/<pid>/io write_bytes; secondhit: what foyer wrote to the
# device); the most each held on disk, sampled each second (nginx: its cache directory, which
# its cache manager trims towards max_size; secondhit: its flash tier's sealed blocks);
# requests/s and p99 of the replay; the most resident memory of the cache's processes (VmHWM,
# summed over nginx's workers and manager).
#
# usage: scripts/bench-media.sh [REQUESTS] [CONCURRENCY]   (installs nginx from Debian if missing)
#   OBJECTS (1,000) Zipf 0.8, ONE_TIME_SHARE (0.12) of requests to objects asked once, seed 1
#   (60 % of the objects of 3,000 requests are asked once);
#   MEMORY (256MiB) and DISKS ("4GiB 1GiB"); PROFILE=release builds quicker than production (LTO).
#   MEDIA_RUNS picks the runs (default "nginx secondhit:second-hit secondhit:second-hit:matched
#   secondhit:admit-all"; `:matched` gives secondhit the flash nginx held at most in its run).
set -euo pipefail
cd "$(dirname "$0")/.."
requests=${1:-3000}
concurrency=${2:-16}
objects=${OBJECTS:-1000}
one_time=${ONE_TIME_SHARE:-0.12}
memory=${MEMORY:-256MiB}
disks=${DISKS:-4GiB 1GiB}
profile=${PROFILE:-production}
# nginx (installed if missing) and nginx_slice_conf, the peer's configuration.
. scripts/bench-common.sh
cargo build --profile "$profile" --quiet
bin=target/$profile/secondhit
dir=$(mktemp -d -p "${BENCH_DIR:-$PWD/target}" bench-media.XXXXXX)
chmod 755 "$dir"
mkdir -p "$dir/logs"
cleanup() {
  kill $(cat "$dir"/*.pid 2>/dev/null) 2>/dev/null || true
  nginx -p "$dir" -c "$dir/nginx.conf" -s stop 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

trace=(--trace "$dir/media.ranges.csv")
gen=(gen-trace --media --objects "$objects" --requests "$requests" --alpha 0.8 --one-time-share "$one_time" --seed 1)
$bin "${gen[@]}" --out "$dir/media.ranges.csv" >/dev/null 2>&1
echo "trace: secondhit ${gen[*]}"
$bin trace-stats "$dir/media.ranges.csv" | awk '/^(requests|objects|one-hit wonders) /' | sed 's/^/  /'
# The bytes of the slices the requests cover (what a sliced cache looks up), from the trace.
sliced=$($bin simulate "${trace[@]}" --slice-size 1MiB --policy admit-all --capacity 1 --no-decompose --json - \
  | python3 -c 'import json,sys; r=json.load(sys.stdin)["results"][0]; print(r["hit_bytes"] + r["origin_bytes"])')
echo "  slices the requests cover: $(numfmt --to=iec "$sliced")B"
echo "memory $memory (secondhit; nginx has the page cache), flash $disks (both, in turn); slices 1 MiB; concurrency $concurrency; $(date -u +%F), $(nproc) cores"
echo

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

# A field of /proc/<pid>/io (or status, for VmHWM in kB) summed over pids.
io_sum() {
  local field=$1 total=0 p n; shift
  for p in "$@"; do
    n=$(awk -v f="$field:" '$1 == f {print $2}' "/proc/$p/io" 2>/dev/null) || n=0
    total=$((total + ${n:-0}))
  done
  echo "$total"
}
hwm_kib() {
  local total=0 p n
  for p in "$@"; do
    n=$(awk '$1 == "VmHWM:" {print $2}' "/proc/$p/status" 2>/dev/null) || n=0
    total=$((total + ${n:-0}))
  done
  echo "$total"
}

for disk in $disks; do
disk_bytes=$(numfmt --from=iec "${disk%iB}")
echo "flash $disk:"
printf '| cache | policy | bytes served | origin bytes | byte hit ratio (slices) | flash bytes written | per byte served | disk held (most) | req/s | p99 ms | RSS (most) | errors |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n'
nginx_held=0
for run in ${MEDIA_RUNS:-nginx secondhit:second-hit secondhit:second-hit:matched secondhit:admit-all}; do
  cache=${run%%:*}
  policy=${run#*:}
  flash=$disk
  matched=""
  if [ "${policy%:matched}" != "$policy" ]; then
    # The flash nginx held at most in this size's run, rounded up to whole 16 MiB blocks.
    policy=${policy%:matched}
    [ "$nginx_held" -gt 0 ] || { echo "a matched run needs the nginx run before it" >&2; exit 2; }
    flash=$(( (nginx_held + (16 << 20) - 1) / (16 << 20) * 16 ))MiB
    matched=", flash $flash: what nginx held"
  fi
  setsid $bin origin --listen 127.0.0.1:18081 --max-age 86400 2>/dev/null & echo $! > "$dir/origin.pid"
  wait_for 18081
  rm -rf "$dir/nginx-cache" "$dir/disk"
  if [ "$cache" = nginx ]; then
    nginx_slice_conf "$dir/nginx.conf" "$dir" 18082 2 "$disk_bytes" "$dir/nginx.pid"
    nginx -p "$dir" -c "$dir/nginx.conf"; port=18082
    wait_for 18082
    pids=$(pgrep -P "$(cat "$dir/nginx.pid")" | tr '\n' ' ')
    name="nginx $(nginx -v 2>&1 | sed 's|.*nginx/||') slice 1m"
    label="min_uses 2"
  else
    setsid $bin serve --origin http://127.0.0.1:18081 --listen 127.0.0.1:18083 --admin-listen 127.0.0.1:18093 \
      --capacity "$memory" --policy "$policy" --slice-size 1MiB --disk-dir "$dir/disk" \
      --disk-capacity "$flash" --disk-policy "$policy" --log-level warn 2>/dev/null & echo $! > "$dir/serve.pid"
    port=18083
    wait_for 18093
    pids=$(cat "$dir/serve.pid")
    name="secondhit serve --slice-size 1MiB"
    label="$policy (memory and flash$matched)"
  fi
  # shellcheck disable=SC2086
  before=$(io_sum write_bytes $pids)
  disk_before=0
  [ "$cache" = secondhit ] && disk_before=$(curl -s http://127.0.0.1:18093/metrics | awk '/^secondhit_disk_device_write_bytes_total /{print $2}')
  # The most the cache held on disk, sampled each second: nginx's max_size is a target its
  # cache manager evicts towards, not a bound; secondhit's flash tier counts its sealed blocks.
  echo 0 > "$dir/disk-most"; touch "$dir/sampling"
  ( most=0
    while [ -e "$dir/sampling" ]; do
      if [ "$cache" = nginx ]; then
        used=$(du -sb "$dir/nginx-cache" 2>/dev/null | cut -f1)
      else
        used=$(curl -s http://127.0.0.1:18093/metrics | awk '/^secondhit_disk_bytes /{printf "%d", $2}')
      fi
      if [ "${used:-0}" -gt "$most" ]; then most=$used; echo "$most" > "$dir/disk-most"; fi
      sleep 1
    done ) &
  sampler=$!
  $bin replay "${trace[@]}" --target "http://127.0.0.1:$port" --concurrency "$concurrency" \
    --origin-stats http://127.0.0.1:18081/_stats --json "$dir/run.json" >/dev/null 2>&1
  sleep 2
  rm -f "$dir/sampling"; wait "$sampler"
  held=$(cat "$dir/disk-most")
  [ "$cache" = nginx ] && nginx_held=$held
  if [ "$cache" = nginx ]; then
    # shellcheck disable=SC2086
    wrote=$(( $(io_sum write_bytes $pids) - before ))
  else
    wrote=$(( $(curl -s http://127.0.0.1:18093/metrics | awk '/^secondhit_disk_device_write_bytes_total /{print $2}') - disk_before ))
  fi
  # shellcheck disable=SC2086
  rss=$(hwm_kib $pids)
  python3 - "$dir/run.json" "$name" "$label" "$wrote" "$rss" "$sliced" "${held:-0}" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
name, label, wrote, rss = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
sliced, held = int(sys.argv[6]), int(float(sys.argv[7]))
served, origin = d["requested_bytes"], d["origin_bytes"] or 0
gib = lambda b: f"{b / 2**30:,.2f} GiB"
print(f"| {name} | {label} | {gib(served)} | {gib(origin)} | {(1 - origin / sliced) * 100:.2f} % | "
      f"{gib(wrote)} | {wrote / served:.3f} | {gib(held)} | {d['requests_per_sec']:,.0f} | {d['latency_ms']['p99']:.1f} | "
      f"{rss / 1024:,.0f} MiB | {d['errors']} |")
PY
  if [ "$cache" = nginx ]; then
    nginx -p "$dir" -c "$dir/nginx.conf" -s stop 2>/dev/null
    while [ -e "$dir/nginx.pid" ]; do sleep 0.1; done
  else
    curl -s http://127.0.0.1:18093/metrics | grep -E '^secondhit_(slices_total|cache_writes_total|disk_writes_total)' \
      | tr '\n' ' ' > "$dir/$policy${matched:+ (flash $flash)}.metrics"
    stop "$dir/serve.pid"
  fi
  stop "$dir/origin.pid"
done
echo
echo "secondhit's own counts (flash $disk):"
for f in "$dir"/*.metrics; do
  echo "  $(basename "$f" .metrics): $(cat "$f")"
done
rm -f "$dir"/*.metrics
echo
echo "prediction (secondhit simulate --slice-size 1MiB, memory above flash $disk; flash evicts slices FIFO, the live tier whole blocks):"
$bin simulate "${trace[@]}" --slice-size 1MiB --policy admit-all,second-hit --capacity "$memory" \
  --disk-capacity "$disk" --disk-policy admit-all,second-hit --no-decompose 2>&1 | sed -n '4,9p'
echo
done
