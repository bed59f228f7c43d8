#!/usr/bin/env bash
# Origin failover, live: three `secondhit origin` servers (weights 1, 1, 2) behind `secondhit
# serve` (an [origins] group: retry on connect, timeout, 502, 503, 504; a server ejected after
# one failure for 5 s; probes of /_stats every second, timeout 1 s, fall 2, rise 1) and behind nginx (an
# upstream of the same weights, max_fails=1 fail_timeout=5s, proxy_next_upstream error timeout
# http_502 http_503, proxy_cache with min_uses 2), in one run. Each replays the bundled web
# trace at CONCURRENCY (64) and RATE requests/s (4,000); server 2 is killed (SIGKILL) KILL_AT
# seconds in (3) and started again RESTART_AT seconds in (7).
#
# Figures per cache: client-visible errors (every request is a GET: none should fail), each
# server's share of the origin requests before the kill against its weight's share, and, for
# secondhit, the time from the kill to the group taking server 2 out and from its restart to
# the group taking it back (/origins polled every 50 ms); requests/s and p99 of the replay.
#
# usage: scripts/bench-failover.sh   (installs nginx from Debian if missing)
#        PROFILE=release builds quicker than the default production (LTO) build.
set -euo pipefail
cd "$(dirname "$0")/.."
concurrency=${CONCURRENCY:-64}
rate=${RATE:-4000}
kill_at=${KILL_AT:-3}
restart_at=${RESTART_AT:-7}
profile=${PROFILE:-production}
. scripts/bench-common.sh
cargo build --profile "$profile" --quiet
bin=target/$profile/secondhit
dir=$(mktemp -d -p "${BENCH_DIR:-$PWD/target}" bench-failover.XXXXXX)
chmod 755 "$dir"
mkdir -p "$dir/logs" "$dir/nginx-cache"
chmod 777 "$dir/nginx-cache"
cleanup() {
  kill $(cat "$dir"/*.pid 2>/dev/null) 2>/dev/null || true
  nginx -p "$dir" -c "$dir/nginx.conf" -s stop 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
ports=(18091 18092 18093)
weights=(1 1 2)

wait_for() {
  local i
  for i in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$1/" && return 0
    sleep 0.1
  done
  echo "nothing answers on port $1" >&2
  return 1
}
start_origin() { # index
  setsid $bin origin --listen "127.0.0.1:${ports[$1]}" --max-age 86400 2>/dev/null &
  echo $! >"$dir/origin$1.pid"
  wait_for "${ports[$1]}"
}
stop() {
  local pid
  pid=$(cat "$1")
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -f "$1"
}
requests_of() { curl -s "http://127.0.0.1:${ports[$1]}/_stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"])'; }

cat >"$dir/serve.toml" <<TOML
listen = "127.0.0.1:18083"
admin_listen = "127.0.0.1:18094"
origin = "fleet"
[log]
level = "error"
[origins.fleet]
servers = ["http://127.0.0.1:${ports[0]}", "http://127.0.0.1:${ports[1]}", { url = "http://127.0.0.1:${ports[2]}", weight = 2 }]
retry_on = ["connect", "timeout", "502", "503", "504"]
[origins.fleet.outlier]
consecutive = 1
ejection = "5s"
max_ejection = "5s"
[origins.fleet.health]
path = "/_stats"
interval = "1s"
timeout = "1s"
rise = 1
fall = 2
TOML
cat >"$dir/nginx.conf" <<NGINX
worker_processes ${NGINX_WORKERS:-2};
pid $dir/nginx.pid;
error_log $dir/logs/nginx-error.log crit;
events { worker_connections 8192; }
http {
  access_log off;
  proxy_cache_path $dir/nginx-cache levels=1:2 keys_zone=c:64m max_size=1g inactive=1d use_temp_path=off;
  upstream fleet {
    server 127.0.0.1:${ports[0]} weight=1 max_fails=1 fail_timeout=5s;
    server 127.0.0.1:${ports[1]} weight=1 max_fails=1 fail_timeout=5s;
    server 127.0.0.1:${ports[2]} weight=2 max_fails=1 fail_timeout=5s;
    keepalive 64;
  }
  server {
    listen 127.0.0.1:18082 backlog=4096;
    location / {
      proxy_pass http://fleet;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_next_upstream error timeout http_502 http_503;
      proxy_cache c;
      proxy_cache_min_uses 2;
      proxy_cache_lock on;
      proxy_max_temp_file_size 0;
      add_header X-Cache \$upstream_cache_status;
    }
  }
}
NGINX

echo "trace: traces/request.trace.xz, concurrency $concurrency, $rate requests/s; server 2 (port ${ports[1]}) killed at ${kill_at}s, restarted at ${restart_at}s; $(date -u +%F), $(nproc) cores"
echo
printf '| cache | requests | errors | share before the kill (weights 1:1:2 = 25/25/50 %%) | out after the kill | back after the restart | req/s | p99 ms |\n|---|---:|---:|---|---:|---:|---:|---:|\n'
for cache in secondhit nginx; do
  rm -rf "$dir/nginx-cache"/*
  for i in 0 1 2; do start_origin "$i"; done
  if [ "$cache" = nginx ]; then
    nginx -p "$dir" -c "$dir/nginx.conf"
    port=18082
    name="nginx $(nginx -v 2>&1 | sed 's|.*nginx/||') upstream"
  else
    setsid $bin serve --config "$dir/serve.toml" 2>"$dir/logs/serve.log" &
    echo $! >"$dir/serve.pid"
    port=18083
    name="secondhit serve, [origins] group"
    wait_for 18094
  fi
  wait_for "$port"
  # secondhit: when server 2 leaves and rejoins the group, from /origins every 50 ms.
  if [ "$cache" = secondhit ]; then
    python3 - "$dir/events" <<'PY' &
import json, sys, time, urllib.request
start, up, out = time.monotonic(), True, open(sys.argv[1], "w")
while time.monotonic() - start < 30:
    try:
        v = json.load(urllib.request.urlopen("http://127.0.0.1:18094/origins", timeout=1))
        now = [s["up"] for g in v["groups"] if g["name"] == "fleet" for s in g["servers"]][1]
        if now != up:
            out.write(f"{'up' if now else 'out'} {time.time():.3f}\n")
            out.flush()
            up = now
    except Exception:
        pass
    time.sleep(0.05)
PY
    echo $! >"$dir/poller.pid"
  fi
  t0=$(date +%s.%N)
  $bin replay --trace traces/request.trace.xz --target "http://127.0.0.1:$port" \
    --concurrency "$concurrency" --rate "$rate" --json "$dir/run.json" >/dev/null 2>&1 &
  echo $! >"$dir/replay.pid"
  sleep "$kill_at"
  before=()
  for i in 0 1 2; do before+=("$(requests_of "$i")"); done
  t_kill=$(date +%s.%N)
  stop "$dir/origin1.pid"
  sleep $((restart_at - kill_at))
  t_restart=$(date +%s.%N)
  start_origin 1
  wait "$(cat "$dir/replay.pid")" || true
  rm -f "$dir/replay.pid"
  out="-"; back="-"
  if [ "$cache" = secondhit ]; then
    sleep 1
    kill "$(cat "$dir/poller.pid")" 2>/dev/null || true
    rm -f "$dir/poller.pid"
    read -r out back < <(python3 - "$dir/events" "$t0" "$t_kill" "$t_restart" <<'PY'
import sys
events = [l.split() for l in open(sys.argv[1])]
t0, kill, restart = (float(x) for x in sys.argv[2:5])
outs = [float(t) for e, t in events if e == "out"]
ups = [float(t) for e, t in events if e == "up"]
o = next((t for t in outs if t >= kill - 0.05), None)
u = next((t for t in ups if t >= restart), None)
print(f"{o - kill:.2f}s" if o is not None else "never", f"{u - restart:.2f}s" if u is not None else "never")
PY
)
    flips=$(python3 -c 'import sys; print(", ".join(f"{e} {float(t) - float(sys.argv[2]):+.2f}s" for e, t in (l.split() for l in open(sys.argv[1]))))' "$dir/events" "$t_kill")
    echo "$flips" >"$dir/flips"
  fi
  python3 - "$dir/run.json" "$name" "$out" "$back" "${before[@]}" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
name, out, back = sys.argv[2:5]
before = [int(x) for x in sys.argv[5:8]]
total = max(sum(before), 1)
share = " / ".join(f"{100 * b / total:.1f}" for b in before)
print(f"| {name} | {d['requests']:,} | {d['errors']} | {share} % | {out} | {back} | "
      f"{d['requests_per_sec']:,.0f} | {d['latency_ms']['p99']:.2f} |")
PY
  if [ "$cache" = nginx ]; then
    nginx -p "$dir" -c "$dir/nginx.conf" -s stop 2>/dev/null
    while [ -e "$dir/nginx.pid" ]; do sleep 0.1; done
  else
    curl -s http://127.0.0.1:18094/metrics | grep -E '^secondhit_origin_retries_total ' >"$dir/retries" || true
    stop "$dir/serve.pid"
  fi
  for i in 0 1 2; do [ ! -f "$dir/origin$i.pid" ] || stop "$dir/origin$i.pid"; done
done
echo
echo "secondhit's retries: $(cat "$dir/retries")"
echo "server 2 in secondhit's group, each change of up from /origins (time from the kill): $(cat "$dir/flips")"
