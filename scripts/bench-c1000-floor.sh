#!/usr/bin/env bash
# How much of the HIT rate a server keeps with 1,000 keep-alive connections instead of 64, for
# secondhit and for servers that do next to nothing: nginx serving the file itself, and four
# floors from `examples/hit_floor.rs` (a bare tokio loop with a buffer per connection, the same
# with a buffer per worker, hyper's HTTP/1 server with a fixed response, that response behind an
# HTTP/1 loop of our own that keeps buffers per worker, as nginx does, and behind secondhit's own
# listener stack as `serve` configures it). All answer the same
# 1 KiB object; wrk -t1 shares the machine's cores with them, as in scripts/bench-proxy.sh.
# If the floors lose as much as secondhit, the loss is the load generator's and the kernel's.
#
# Columns: requests/s at 64 and at 1,000 connections (medians), each round's 1,000 / 64, the
# server's CPU per request (user + system over the run / requests), and the server's and wrk's
# cores at 1,000 connections (wrk -t1 cannot use more than one).
#
# PIN=1 gives each side a core of its own: every server runs one worker (secondhit --workers 1,
# one nginx worker process, the floors with one thread) on CPU 0, and wrk runs on CPU 1, so
# that whichever side is at a full core is the one that holds the rate.
#
# usage: scripts/bench-c1000-floor.sh        (RUNS rounds, default 3; DURATION s, default 6;
#                                             PIN=1 as above; ONLY="secondhit stack" to load
#                                             only some of: nginx secondhit conn worker hyper
#                                             own stack)
set -euo pipefail
cd "$(dirname "$0")/.."
# nginx and wrk (installed if missing), www_with_1k, static_nginx_conf, ticks, MEDIAN.
. scripts/bench-common.sh
RUNS=${RUNS:-3}
ALL="nginx secondhit conn worker hyper own stack"
ONLY=${ONLY:-$ALL}
port_of() {
  case $1 in
    nginx) echo 18181 ;; secondhit) echo 18183 ;; conn) echo 18184 ;; worker) echo 18185 ;;
    hyper) echo 18186 ;; own) echo 18187 ;; stack) echo 18188 ;;
    *) echo "unknown server '$1' in ONLY: one of $ALL" >&2; return 1 ;;
  esac
}
ports=$(for k in $ONLY; do port_of "$k" || exit 1; done | tr '\n' ' ')
cargo build --profile production --quiet --bin secondhit --example hit_floor
DURATION=${DURATION:-6}
if [ "${PIN:-0}" = 1 ]; then
  [ "$(nproc)" -ge 2 ] || { echo "PIN=1 needs two CPUs" >&2; exit 1; }
  workers=1 server_cpu="taskset -c 0" load_cpu="taskset -c 1"
else
  workers=2 server_cpu="" load_cpu=""
fi
ulimit -n 65536 2>/dev/null || true
dir=$(mktemp -d)
cleanup() {
  kill $(cat "$dir"/*.pid 2>/dev/null) 2>/dev/null || true
  nginx -p "$dir" -c "$dir/nginx.conf" -s stop 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
www_with_1k "$dir"
NGINX_WORKERS=$workers static_nginx_conf "$dir/nginx.conf" "$dir/www" 18181 "$dir/nginx.pid" \
  "$dir/logs/error.log" backlog=4096
$server_cpu nginx -p "$dir" -c "$dir/nginx.conf"
# Each in a session of its own (see scripts/bench-proxy.sh: the kernel's autogroups).
setsid $server_cpu target/production/secondhit serve --origin http://127.0.0.1:18181 \
  --listen 127.0.0.1:18183 --admin-listen 127.0.0.1:18193 --workers $workers --log-level warn \
  2>"$dir/logs/secondhit.log" &
echo $! > "$dir/secondhit.pid"
for mode in conn worker hyper own stack; do
  case " $ONLY " in *" $mode "*) ;; *) continue ;; esac
  setsid $server_cpu target/production/examples/hit_floor "$(port_of $mode)" $mode $workers \
    2>"$dir/logs/$mode.log" &
  echo $! > "$dir/$mode.pid"
done
sleep 1
for f in "$dir"/*.pid; do kill -0 "$(cat "$f")" || { echo "the server of $f is not running" >&2; exit 1; }; done
name_of() {
  case $1 in
    18181) echo "nginx, the file itself" ;;
    18183) echo "secondhit serve, HIT" ;;
    18184) echo "floor: tokio, a buffer per connection" ;;
    18185) echo "floor: tokio, a buffer per worker" ;;
    18186) echo "floor: hyper, a fixed response" ;;
    18187) echo "floor: an HTTP/1 loop of our own, buffers per worker" ;;
    18188) echo "floor: secondhit's listener stack, a fixed response" ;;
  esac
}
pids_of() {
  case $1 in
    18181) echo "$(cat "$dir/nginx.pid") $(pgrep -P "$(cat "$dir/nginx.pid")" | tr '\n' ' ')" ;;
    18183) cat "$dir/secondhit.pid" ;;
    18184) cat "$dir/conn.pid" ;;
    18185) cat "$dir/worker.pid" ;;
    18186) cat "$dir/hyper.pid" ;;
    18187) cat "$dir/own.pid" ;;
    18188) cat "$dir/stack.pid" ;;
  esac
}
: > "$dir/rows"
for round in $(seq 1 "$RUNS"); do
  order=$(echo $ports | awk -v r="$round" '{ for (i = 0; i < NF; i++) printf "%s ", $((i + r - 1) % NF + 1) }')
  for port in $order; do
    for conns in 64 1000; do
      url="http://127.0.0.1:$port/obj-1k"
      for _ in 1 2; do curl -s -o /dev/null "$url"; done  # secondhit: the second request stores
      pids=$(pids_of $port)
      t0=$(ticks $pids)
      out=$($load_cpu wrk -t1 -c$conns -d${DURATION}s "$url"
        rc=$?; read -r stat < /proc/$BASHPID/stat; echo "WRKSTAT ${stat##*) }"; exit $rc)
      t1=$(ticks $pids)
      echo "$out" | awk -v port=$port -v c=$conns -v t=$((t1 - t0)) -v hz=$hz -v d=$DURATION -v round=$round '
        /requests in/ { n = $1 }
        /Requests\/sec/ { rps = $2 }
        /Non-2xx|Socket errors/ { err = 1 }
        /^WRKSTAT/ { wrk = ($15 + $16) / hz / d }  # cutime + cstime (fields 16, 17)
        END { if (err) { print "errors from wrk at port " port > "/dev/stderr"; exit 1 }
              printf "%s %s %s %.0f %.1f %.2f %.2f\n", round, port, c, rps, t / hz * 1e6 / n, wrk, t / hz / d }' >> "$dir/rows"
    done
  done
done
printf '| server | requests/s at 64 | at 1,000 | 1,000 / 64, each round | CPU us/request 64 -> 1,000 | cores at 1,000: server, wrk |\n|---|---:|---:|---|---:|---:|\n'
for port in $ports; do
  awk -v port=$port -v name="$(name_of $port)" "$MEDIAN"'
    $2 == port && $3 == 64 { r64[$1] = $4; c64[++n64] = $5; x64[n64] = $4 }
    $2 == port && $3 == 1000 { r1k[$1] = $4; c1k[++n1k] = $5; x1k[n1k] = $4; w1k[n1k] = $6; s1k[n1k] = $7 }
    END {
      ratios = ""
      for (r = 1; r <= n64; r++) ratios = ratios (r > 1 ? " / " : "") sprintf("%.2f", r1k[r] / r64[r])
      printf "| %s | %.0f | %.0f | %s | %.1f -> %.1f | %.2f, %.2f |\n", name, median(x64, n64), median(x1k, n1k), ratios, median(c64, n64), median(c1k, n1k), median(s1k, n1k), median(w1k, n1k)
    }' "$dir/rows"
done
