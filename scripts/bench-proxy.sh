#!/usr/bin/env bash
# HIT-path throughput and latency: secondhit serve against nginx proxy_cache with
# proxy_cache_min_uses 2 (nginx's own "second hit"), in front of the same origin (nginx serving
# static files), same machine, same run, loaded by wrk over loopback. Bounded: 10 s per run.
#
# usage: scripts/bench-proxy.sh   (installs nginx and wrk from Debian if missing)
#        BASELINE=path/to/older/secondhit scripts/bench-proxy.sh
#          also runs an older build in the same run (to show what a change costs)
#        ACCESS_LOG=1 BASELINE=target/release/secondhit scripts/bench-proxy.sh
#          nginx and secondhit write access logs to files (the baseline does not): what
#          logging every request costs, in the same run
#        ACCESS_LOG=1 BASELINE_LOG=1 BASELINE=... scripts/bench-proxy.sh
#          the baseline logs too (to compare two builds' logging)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nginx >/dev/null && command -v wrk >/dev/null || {
  apt-get update -qq && apt-get install -y -qq nginx wrk >/dev/null
}
cargo build --release --quiet
dir=$(mktemp -d)
trap 'kill $(cat "$dir"/*.pid 2>/dev/null) 2>/dev/null || true; nginx -p "$dir" -c "$dir/nginx.conf" -s stop 2>/dev/null || true; rm -rf "$dir"' EXIT
mkdir -p "$dir/www" "$dir/cache" "$dir/logs"
chmod 755 "$dir"  # nginx workers run as an unprivileged user
head -c 4096 /dev/urandom > "$dir/www/obj-4k"
head -c 65536 /dev/urandom > "$dir/www/obj-64k"
chmod -R a+rX "$dir/www"; chmod 777 "$dir/cache"
NGINX_LOG=off
SECONDHIT_LOG=()
if [ -n "${ACCESS_LOG:-}" ]; then
  NGINX_LOG="$dir/logs/nginx-access.log"
  SECONDHIT_LOG=(--access-log-format combined --access-log-file "$dir/logs/secondhit-access.log")
fi
cat > "$dir/nginx.conf" <<NGINX
worker_processes 2;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log ${NGINX_LOG};
  sendfile on;
  keepalive_requests 1000000;
  proxy_cache_path $dir/cache levels=1:2 keys_zone=c:16m max_size=256m inactive=1h use_temp_path=off;
  upstream origin { server 127.0.0.1:18081; keepalive 64; }
  server {                                    # the origin
    listen 127.0.0.1:18081;
    root $dir/www;
    add_header Cache-Control "public, max-age=3600";
  }
  server {                                    # the cache under test
    listen 127.0.0.1:18082;
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache c;
      proxy_cache_min_uses 2;
      add_header X-Cache \$upstream_cache_status;
    }
  }
}
NGINX
nginx -p "$dir" -c "$dir/nginx.conf"
target/release/secondhit serve --origin http://127.0.0.1:18081 --listen 127.0.0.1:18083 \
  --admin-listen 127.0.0.1:18093 --log-level warn "${SECONDHIT_LOG[@]}" 2>"$dir/logs/secondhit.log" &
echo $! > "$dir/secondhit.pid"
ports="18082 18083"
if [ -n "${BASELINE:-}" ]; then
  BASELINE_ARGS=()
  if [ -n "${BASELINE_LOG:-}" ]; then
    BASELINE_ARGS=(--access-log-format combined --access-log-file "$dir/logs/baseline-access.log")
  fi
  "$BASELINE" serve --origin http://127.0.0.1:18081 --listen 127.0.0.1:18084 \
    --admin-listen 127.0.0.1:18094 --log-level warn "${BASELINE_ARGS[@]}" 2>"$dir/logs/baseline.log" &
  echo $! > "$dir/baseline.pid"
  ports="18082 18083 18084"
fi
sleep 1

printf '| object | cache | requests/s | p50 | p90 | p99 | max | X-Cache |\n|---|---|---:|---:|---:|---:|---:|---|\n'
for obj in obj-4k obj-64k; do
  for port in $ports; do
    case $port in
      18082) name="nginx 1.22 proxy_cache, min_uses 2" ;;
      18083) name="secondhit serve" ;;
      *) name="secondhit serve (baseline: $BASELINE)" ;;
    esac
    for _ in 1 2 3; do curl -s -o /dev/null "http://127.0.0.1:$port/$obj"; done
    xc=$(curl -s -D - -o /dev/null "http://127.0.0.1:$port/$obj" | tr -d '\r' | awk -F': ' 'tolower($1)=="x-cache"{print $2}')
    out=$(wrk -t2 -c64 -d10s --latency "http://127.0.0.1:$port/$obj")
    rps=$(echo "$out" | awk '/Requests\/sec/{print $2}')
    lat() { echo "$out" | awk -v p="$1" '$1==p{print $2}'; }
    max=$(echo "$out" | awk '/Latency/ && !/Distribution/{print $4; exit}')
    printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$obj" "$name" "$rps" "$(lat 50%)" "$(lat 90%)" "$(lat 99%)" "$max" "$xc"
  done
done
if [ -n "${ACCESS_LOG:-}" ]; then
  echo
  echo "access log lines: nginx $(wc -l < "$dir/logs/nginx-access.log"), secondhit $(wc -l < "$dir/logs/secondhit-access.log")"
  curl -s http://127.0.0.1:18093/metrics | grep '^secondhit_access_log_dropped_total' || true; echo
fi
