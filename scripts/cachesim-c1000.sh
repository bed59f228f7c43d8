#!/usr/bin/env bash
# What a HIT costs in user space at 64 and at 1,000 keep-alive connections, counted rather than
# timed: each server runs under valgrind's callgrind with a cache model of one core of this
# machine (32 KiB 8-way L1d and L1i; the last level is its 512 KiB 8-way L2, so a "miss" is a
# trip to the shared L3 or to memory), one worker, and wrk -t1 loads it with 64 or with 1,000
# connections for 24 s (valgrind is slow: a request may take seconds). The counters cover 10 s
# in the middle of the run, after every connection is open, so connecting is not counted; the
# requests in that window are the bytes the server sent (tcp_info, from `ss`) over the bytes of
# one response.
#
# Servers: nginx serving the file itself (one process, no master), secondhit serve answering a
# HIT, and the floors of `examples/hit_floor.rs` (see scripts/bench-c1000-floor.sh): hyper with a
# fixed response, that response behind secondhit's own listener stack, behind an HTTP/1 loop of
# our own with buffers per worker, and a bare tokio loop with a buffer per worker.
#
# The kernel is not in these counts (valgrind sees user space only), and a simulated cache is
# not a timing: the columns say how much work and how much cold memory a request touches, and
# how that changes when the connections are many.
#
# usage: scripts/cachesim-c1000.sh           (ONLY="secondhit hyper" to run some of:
#                                              nginx secondhit hyper stack own worker;
#                                              L2_BYTES and L2_WAYS for another last level,
#                                              default 524288 and 8)
set -euo pipefail
cd "$(dirname "$0")/.."
# nginx and wrk (installed if missing), www_with_1k, static_nginx_conf.
. scripts/bench-common.sh
command -v valgrind >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind >/dev/null; }
ONLY=${ONLY:-nginx secondhit hyper stack own worker}
L2_BYTES=${L2_BYTES:-524288} L2_WAYS=${L2_WAYS:-8}
cargo build --profile production --quiet --bin secondhit --example hit_floor
ulimit -n 65536 2>/dev/null || true
[ "$(ulimit -n)" -ge 1100 ] || { echo "1,000 connections need more than $(ulimit -n) open files" >&2; exit 1; }
dir=$(mktemp -d)
port=18291 origin=18290
cleanup() {
  kill $(cat "$dir"/*.pid 2>/dev/null) 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
www_with_1k "$dir"
NGINX_WORKERS=1 static_nginx_conf "$dir/nginx.conf" "$dir/www" $port "$dir/nginx.pid" "$dir/logs/error.log"
sed -i '1i daemon off;\nmaster_process off;' "$dir/nginx.conf"
# secondhit's origin (not measured): hyper's floor, whose answer may be cached for an hour.
setsid target/production/examples/hit_floor $origin hyper 1 2>"$dir/logs/origin.log" &
echo $! > "$dir/origin.pid"

command_of() {
  case $1 in
    nginx) echo "nginx -p $dir -c $dir/nginx.conf" ;;
    secondhit) echo "target/production/secondhit serve --origin http://127.0.0.1:$origin \
      --listen 127.0.0.1:$port --admin-listen 127.0.0.1:$((port + 1)) --workers 1 --log-level warn" ;;
    hyper | stack | own | worker) echo "target/production/examples/hit_floor $port $1 1" ;;
    *) echo "unknown server '$1' in ONLY: one of nginx secondhit hyper stack own worker" >&2; return 1 ;;
  esac
}
name_of() {
  case $1 in
    nginx) echo "nginx, the file itself" ;;
    secondhit) echo "secondhit serve, HIT" ;;
    hyper) echo "floor: hyper, a fixed response" ;;
    stack) echo "floor: secondhit's listener stack, a fixed response" ;;
    own) echo "floor: an HTTP/1 loop of our own, buffers per worker" ;;
    worker) echo "floor: tokio, a buffer per worker" ;;
  esac
}
# Bytes the server has sent on its established connections.
sent() {
  ss -tin state established "( sport = :$port )" | grep -o 'bytes_sent:[0-9]*' |
    awk -F: '{ s += $2 } END { print s + 0 }'
}
url="http://127.0.0.1:$port/obj-1k"
: > "$dir/rows"
for server in $ONLY; do
  cmd=$(command_of "$server")
  for conns in 64 1000; do
    out="$dir/cg.$server.$conns"
    # shellcheck disable=SC2086  # the command is words
    setsid valgrind --tool=callgrind --cache-sim=yes --I1=32768,8,64 --D1=32768,8,64 \
      --LL=$L2_BYTES,$L2_WAYS,64 --callgrind-out-file="$out.%p" $cmd 2>"$dir/logs/$server.$conns.log" &
    pid=$!
    echo $pid > "$dir/server.pid"
    for _ in $(seq 1 120); do curl -s -o /dev/null "$url" && break; sleep 0.5; done
    curl -s -o /dev/null "$url"  # secondhit: the second request stores
    per=$(curl -s -o /dev/null -w '%{size_header} %{size_download}' "$url" | awk '{ print $1 + $2 }')
    [ "$per" -gt 1024 ] || { echo "$server does not answer on $url" >&2; exit 1; }
    wrk -t1 -c$conns -d24s --timeout 30s "$url" > "$dir/wrk.out" &
    wrk=$!
    sleep 8
    b0=$(sent)
    callgrind_control -z $pid >/dev/null 2>&1
    sleep 10
    b1=$(sent)
    callgrind_control -d $pid >/dev/null 2>&1
    wait $wrk
    if grep -q 'Non-2xx\|Socket errors' "$dir/wrk.out"; then
      echo "errors from wrk against $server at $conns connections:" >&2; cat "$dir/wrk.out" >&2; exit 1
    fi
    kill $pid; wait $pid 2>/dev/null || true
    # The dump, not the file written at exit: the one whose name ends in .1.
    f=$(ls "$out".*.1)
    awk -v n=$(((b1 - b0) / per)) -v s=$server -v c=$conns '
      /^events:/ { for (i = 2; i <= NF; i++) ev[i] = $i }
      /^summary:/ { for (i = 2; i <= NF; i++) t[ev[i]] = $i }
      END { if (n < 1000) { print s " served " n " requests in the window" > "/dev/stderr"; exit 1 }
            printf "%s %s %d %.0f %.1f %.1f %.1f %.1f\n", s, c, n, t["Ir"] / n,
              (t["D1mr"] + t["D1mw"]) / n, (t["DLmr"] + t["DLmw"]) / n, t["DLmr"] / n, t["DLmw"] / n }' \
      "$f" >> "$dir/rows"
  done
done
echo "last level: $L2_BYTES bytes, $L2_WAYS-way"
printf '| server | instructions a request, 64 -> 1,000 | L1d misses a request | L2 misses a request (reads + writes) |\n|---|---:|---:|---:|\n'
for server in $ONLY; do
  awk -v s=$server -v name="$(name_of $server)" '
    $1 == s && $2 == 64 { i64 = $4; d64 = $5; l64 = $6 }
    $1 == s && $2 == 1000 { i1k = $4; d1k = $5; l1k = $6; r1k = $7; w1k = $8 }
    END { printf "| %s | %d -> %d | %.1f -> %.1f | %.1f -> %.1f (%.1f + %.1f) |\n", name, i64, i1k, d64, d1k, l64, l1k, r1k, w1k }' \
    "$dir/rows"
done
