#!/usr/bin/env bash
# The proxy against nginx, side by side in one run: every scenario of the performance work,
# loaded by wrk over loopback. nginx proxy_cache with proxy_cache_min_uses 2 (nginx's own
# "second hit", 2 workers) and `secondhit serve` (defaults) sit in front of the same origin (a
# separate nginx serving static files), so each cache's CPU is its own. Bounded: DURATION
# seconds per run (default 8), plus short warm-ups.
#
# Scenarios (SCENARIOS="hit_1k hit_16k_x1000 ..." picks some; default all):
#   hit_1k         one hot 1 KiB object, every request a HIT
#   hit_16k_x1000  1,000 hot 16 KiB objects, uniformly at random
#   hit_256k_x100  100 hot 256 KiB objects, uniformly at random
#   hit_1m         one hot 1 MiB object
#   hit_1k_c1000   hit_1k with 1,000 keep-alive connections instead of 64
#   miss_1k        a never-seen key every request (1 KiB): forwarded, streamed back, not stored
#                  (secondhit: DEFERRED; nginx: counted by min_uses, not stored)
#   fill_1k        memory: 20 s of new 1 KiB keys, each asked twice (stored on the second),
#                  past the cache's capacity (256 MiB, the default); then resident memory
#                  against what the cache accounts for (secondhit only; nginx keeps it on disk)
#
# Every scenario runs RUNS times (default 3), each round loading every cache once in turn (each
# round starting with the next cache), and a table of medians follows, with each cache's
# requests/s over nginx's as the median of the rounds' ratios: this machine is shared, and a
# cache run a few seconds after another can find the machine busier (10-30 % between runs of
# the same build).
#
# Columns: requests/s, latency p50/p99, CPU per request (the cache's user+system CPU time over
# the run / requests; nginx: master and workers) and its split into user and system time, wrk's
# own CPU per request (it shares the two cores), errors (non-2xx and socket errors), resident
# memory after the run (nginx: the sum of its processes', shared pages counted in each). When
# hit_1k and hit_1k_c1000 both ran, a last table sets each cache's rate at 1,000 connections
# against its rate at 64, with where the CPU per request went.
#
# usage: scripts/bench-proxy.sh   (installs nginx and wrk from Debian if missing)
#        BASELINE=path/to/older/secondhit scripts/bench-proxy.sh
#          also runs an older build in the same run (to show what a change costs)
#        ACCESS_LOG=1 BASELINE=target/production/secondhit scripts/bench-proxy.sh
#          nginx and secondhit write access logs to files (the baseline does not): what
#          logging every request costs, in the same run
#        ACCESS_LOG=1 BASELINE_LOG=1 BASELINE=... scripts/bench-proxy.sh
#          the baseline logs too (to compare two builds' logging)
#        SECONDHIT_BIN=path/to/secondhit scripts/bench-proxy.sh
#          measures that binary instead of building this tree (target/production/secondhit)
#        ICOUNT=1 scripts/bench-proxy.sh
#          also counts user-space instructions per request under valgrind's callgrind (installed
#          from Debian if missing) for miss_1k and hit_1k: nginx (one process) and secondhit
#          (one worker), each alone at 16 connections. Exact to a fraction of a per cent from run to
#          run, where the timings above drift: what a code change saves shows here first
#        ORIGINS=3 BASELINE=path/to/older/secondhit scripts/bench-proxy.sh
#          the origin answers on three ports and this build's default origin is a group of the
#          three (--origin given three times; the baseline keeps one): what the group costs
#        FLASH=1 scripts/bench-proxy.sh
#          also runs this build with 1 MiB of memory above a 1 GiB flash tier in the run's
#          directory (cache.disk): hit_16k_x1000, hit_256k_x100 and hit_1m are then flash hits
#          (memory holds few 16 KiB objects and no larger one), hit_1k a memory hit; like nginx's cache, the
#          flash tier's files are read through the page cache
#        NO_SENDFILE=1 scripts/bench-proxy.sh
#          also runs this build with cache.sendfile = false: every stored body on the heap and
#          written with writev (copied into the socket), where the default keeps bodies of
#          128 KiB or more in sealed memory files sent with sendfile (hit_256k_x100, hit_1m)
#        LAB=1 scripts/bench-proxy.sh
#          also runs this build with three shadow policies and the recording on (--shadow
#          admit-all,nth-hit:3,second-hit:window=10m --record FILE): what the lab costs
#          (its threads' CPU is counted: they are in the same process)
set -euo pipefail
cd "$(dirname "$0")/.."
# nginx and wrk (installed if missing), static_nginx_conf, ticks, MEDIAN.
. scripts/bench-common.sh
if [ -z "${SECONDHIT_BIN:-}" ]; then
  cargo build --profile production --quiet  # LTO: what to deploy (Cargo.toml)
fi
bin=${SECONDHIT_BIN:-target/production/secondhit}
DURATION=${DURATION:-8}
RUNS=${RUNS:-3}
SCENARIOS=${SCENARIOS:-hit_1k hit_16k_x1000 hit_1m hit_1k_c1000 miss_1k fill_1k}
ulimit -n 65536 2>/dev/null || true
dir=$(mktemp -d)
cleanup() {
  kill $(cat "$dir"/*.pid 2>/dev/null) 2>/dev/null || true
  for n in origin cache; do nginx -p "$dir" -c "$dir/$n.conf" -s stop 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
mkdir -p "$dir/www" "$dir/logs"
chmod 755 "$dir"  # nginx workers run as an unprivileged user
head -c 1024 /dev/urandom > "$dir/www/obj-1k"
head -c 16384 /dev/urandom > "$dir/www/obj-16k"
head -c 262144 /dev/urandom > "$dir/www/obj-256k"
head -c 1048576 /dev/urandom > "$dir/www/obj-1m"
chmod -R a+rX "$dir/www"
NGINX_LOG=off
SECONDHIT_LOG=()
if [ -n "${ACCESS_LOG:-}" ]; then
  NGINX_LOG="$dir/logs/nginx-access.log"
  SECONDHIT_LOG=(--access-log-format combined --access-log-file "$dir/logs/secondhit-access.log")
fi
static_nginx_conf "$dir/origin.conf" "$dir/www" 18081 "$dir/origin-nginx.pid" "$dir/logs/origin-error.log"
origin_flags=(--origin http://127.0.0.1:18081)
if [ "${ORIGINS:-1}" = 3 ]; then
  # The same files on two more ports: three servers for the group.
  sed -i 's|^    listen 127.0.0.1:18081;|    listen 127.0.0.1:18081;\n    listen 127.0.0.1:18088;\n    listen 127.0.0.1:18089;|' "$dir/origin.conf"
  origin_flags+=(--origin http://127.0.0.1:18088 --origin http://127.0.0.1:18089)
fi
NGINX_LOG=$NGINX_LOG nginx_cache_conf "$dir/cache.conf" "$dir" 18082 2 256m "$dir/cache-nginx.pid"
nginx -p "$dir" -c "$dir/origin.conf"
nginx -p "$dir" -c "$dir/cache.conf"
# Each server in a session of its own, as nginx's daemons are (setsid keeps the pid): with the
# kernel's autogroups on (/proc/sys/kernel/sched_autogroup_enabled, Debian's default), CPU is
# shared fairly between sessions first, so a cache started from this script would share one
# session's share with wrk while nginx's caches had their own. Measured that way, secondhit's
# miss_1k p99 was 2-5x nginx's (5-25 ms); in a session of its own it is nginx's.
setsid "$bin" serve "${origin_flags[@]}" --listen 127.0.0.1:18083 \
  --admin-listen 127.0.0.1:18093 --log-level warn "${SECONDHIT_LOG[@]}" 2>"$dir/logs/secondhit.log" &
echo $! > "$dir/secondhit.pid"
ports="18082 18083"
if [ -n "${LAB:-}" ] || [ -n "${FLASH:-}" ] || [ -n "${NO_SENDFILE:-}" ]; then
  BASELINE=${BASELINE:-$bin}
fi
if [ -n "${BASELINE:-}" ]; then
  BASELINE_ARGS=()
  if [ -n "${BASELINE_LOG:-}" ]; then
    BASELINE_ARGS=(--access-log-format combined --access-log-file "$dir/logs/baseline-access.log")
  fi
  if [ -n "${LAB:-}" ]; then
    BASELINE_ARGS+=(--shadow admit-all,nth-hit:3,second-hit:window=10m --record "$dir/logs/lab.oracleGeneral")
  fi
  if [ -n "${FLASH:-}" ]; then
    printf '[cache]\ncapacity = "1MiB"\n[cache.disk]\ndir = "%s"\ncapacity = "1GiB"\n' "$dir/flash" >"$dir/flash.toml"
    BASELINE_ARGS+=(--config "$dir/flash.toml")
  fi
  if [ -n "${NO_SENDFILE:-}" ]; then
    printf '[cache]\nsendfile = false\n' >"$dir/no-sendfile.toml"
    BASELINE_ARGS+=(--config "$dir/no-sendfile.toml")
  fi
  setsid "$BASELINE" serve --origin http://127.0.0.1:18081 --listen 127.0.0.1:18084 \
    --admin-listen 127.0.0.1:18094 --log-level warn "${BASELINE_ARGS[@]}" 2>"$dir/logs/baseline.log" &
  echo $! > "$dir/baseline.pid"
  ports="18082 18083 18084"
fi
sleep 1
for f in "$dir"/secondhit.pid "$dir"/baseline.pid; do
  # The pid must be the server's own (setsid did not fork), or its CPU would not be counted.
  [ ! -f "$f" ] || kill -0 "$(cat "$f")" || { echo "the server of $f is not running" >&2; exit 1; }
done

# wrk scripts: a random one of 1,000 (or 100) objects; a key never asked before.
cat > "$dir/x1000.lua" <<'LUA'
math.randomseed(os.time())
request = function() return wrk.format(nil, "/obj-16k?k=" .. math.random(1000)) end
LUA
cat > "$dir/x100.lua" <<'LUA'
math.randomseed(os.time())
request = function() return wrk.format(nil, "/obj-256k?k=" .. math.random(100)) end
LUA
cat > "$dir/unique.lua" <<'LUA'
local threads = 0
function setup(thread) threads = threads + 1; thread:set("tid", threads) end
local n = 0
request = function()
  n = n + 1
  return wrk.format(nil, "/obj-1k?u=" .. run .. "-" .. tid .. "-" .. n)
end
function init(args) run = args[1] end
LUA
cat > "$dir/twice.lua" <<'LUA'
local threads = 0
function setup(thread) threads = threads + 1; thread:set("tid", threads) end
local n = 0
request = function()
  n = n + 1
  return wrk.format(nil, "/obj-1k?f=" .. tid .. "-" .. math.floor((n + 1) / 2))
end
LUA

# The pids whose CPU and memory are the cache's.
pids_of() {
  case $1 in
    18082) echo "$(cat "$dir/cache-nginx.pid") $(pgrep -P "$(cat "$dir/cache-nginx.pid")" | tr '\n' ' ')" ;;
    18083) cat "$dir/secondhit.pid" ;;
    *) cat "$dir/baseline.pid" ;;
  esac
}
rss_mib() { local k=0; for p in "$@"; do k=$((k + $(awk '/^VmRSS/{print $2}' "/proc/$p/status" 2>/dev/null || echo 0))); done; echo $((k / 1024)); }

fills=""
summary=""
printf '| scenario | round | cache | requests/s | p50 | p99 | CPU us/request | user / system | wrk us/request | errors | RSS MiB | X-Cache |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n'
: > "$dir/all"
run=0
for scenario in $SCENARIOS; do
  rounds=$RUNS; [ "$scenario" = fill_1k ] && rounds=1
  : > "$dir/results"
  for round in $(seq 1 "$rounds"); do
  # Each round starts with the next cache (nginx, secondhit, baseline; then secondhit, ...), so
  # that no cache always runs right after the same other one.
  order=$(echo $ports | awk -v r="$round" '{ for (i = 0; i < NF; i++) printf "%s ", $((i + r - 1) % NF + 1) }')
  for port in $order; do
    if [ "$scenario" = fill_1k ]; then
      [ "$port" = 18082 ] && continue
      pids=$(pids_of $port)
      wrk -t1 -c64 -d20s -s "$dir/twice.lua" "http://127.0.0.1:$port/" >/dev/null
      sleep 2
      m=$(curl -s "http://127.0.0.1:$((port + 10))/metrics")
      bytes=$(echo "$m" | awk '/^secondhit_cache_bytes /{print $2}')
      entries=$(echo "$m" | awk '/^secondhit_cache_entries /{print $2}')
      rss=$(rss_mib $pids)
      fills+=$(awk -v b="$bytes" -v e="$entries" -v r="$rss" -v p="$port" 'BEGIN{
        printf "| %s | %d | %.1f | %.0f | %d | %.2f | %.2f |\n", (p == 18083 ? "secondhit serve" : "baseline"),
          e, b / 1048576, b / e, r, r / (b / 1048576), (b / 1048576 * 1.2 + 64) / r }')$'\n'
      continue
    fi
    case $port in
      18082) name="nginx proxy_cache, min_uses 2" ;;
      18083) name="secondhit serve" ;;
      *) if [ -n "${LAB:-}" ]; then name="secondhit + 3 shadows + --record"; elif [ -n "${FLASH:-}" ]; then name="secondhit, 1 MiB memory above flash"; elif [ -n "${NO_SENDFILE:-}" ]; then name="secondhit, cache.sendfile = false"; else name="secondhit (baseline: $BASELINE)"; fi ;;
    esac
    url="http://127.0.0.1:$port"
    conns=64; args=()
    case $scenario in
      hit_1k) path=/obj-1k ;;
      hit_1m) path=/obj-1m ;;
      hit_256k_x100) path=/obj-256k?k=1; args=(-s "$dir/x100.lua")
        wrk -t1 -c64 -d2s "${args[@]}" "$url/" >/dev/null ;;  # warm: every object to HIT
      hit_1k_c1000) path=/obj-1k; conns=1000 ;;
      hit_16k_x1000) path=/obj-16k?k=1; args=(-s "$dir/x1000.lua")
        wrk -t1 -c64 -d2s "${args[@]}" "$url/" >/dev/null ;;  # warm: every object to HIT
      miss_1k) run=$((run + 1)); path=/obj-1k?u=probe-$port-$run; args=(-s "$dir/unique.lua") ;;
      *) echo "unknown scenario $scenario" >&2; exit 2 ;;
    esac
    case $scenario in miss_1k) ;; *) for _ in 1 2 3; do curl -s -o /dev/null "$url$path"; done ;; esac
    xc=$(curl -s -D - -o /dev/null "$url$path" | tr -d '\r' | awk -F': ' 'tolower($1)=="x-cache"{print $2}')
    pids=$(pids_of $port)
    t0=$(ticks $pids); u0=$(user_ticks $pids)
    extra=(); [ "$scenario" = miss_1k ] && extra=(-- "r$run")
    # wrk's CPU: the subshell's waited-for children's user + system ticks (stat fields 16, 17),
    # read with builtins only once wrk has exited; wrk's exit status is the subshell's.
    out=$(wrk -t1 -c$conns -d${DURATION}s --latency "${args[@]}" "$url$path" "${extra[@]}"
      rc=$?; read -r stat < /proc/$BASHPID/stat; echo "WRKSTAT ${stat##*) }"; exit $rc)
    t1=$(ticks $pids); u1=$(user_ticks $pids)
    total=$(echo "$out" | awk '/requests in/{print $1}')
    rps=$(echo "$out" | awk '/Requests\/sec/{print $2}')
    lat() { echo "$out" | awk -v p="$1" '$1==p{print $2}'; }
    errors=$(echo "$out" | awk '/Non-2xx/{n+=$NF} /Socket errors/{gsub(",","");n+=$4+$6+$8+$10} END{print n+0}')
    per() { awk -v t="$1" -v hz="$hz" -v n="$total" 'BEGIN{printf "%.1f", t / hz * 1e6 / n}'; }
    cpu=$(per $((t1 - t0)))
    user=$(per $((u1 - u0))); sys=$(per $((t1 - t0 - u1 + u0)))
    # After "state ppid ..." (the text after the command's closing parenthesis), cutime and
    # cstime are the 14th and 15th fields.
    wrkcpu=$(per "$(echo "$out" | awk '/^WRKSTAT/{print $15 + $16}')")
    printf '| %s | %s | %s | %s | %s | %s | %s | %s / %s | %s | %s | %s | %s |\n' "$scenario" "$round" "$name" "$rps" "$(lat 50%)" "$(lat 99%)" "$cpu" "$user" "$sys" "$wrkcpu" "$errors" "$(rss_mib $pids)" "$xc"
    echo "$round $port $rps $cpu $(lat 99%) $errors" >> "$dir/results"
    echo "$scenario $round $port $rps $user $sys $wrkcpu" >> "$dir/all"
  done
  done
  [ "$scenario" = fill_1k ] && continue
  # Medians over the rounds; the ratio is the median of each round's secondhit / nginx.
  for port in $ports; do
    case $port in
      18082) name="nginx proxy_cache, min_uses 2" ;;
      18083) name="secondhit serve" ;;
      *) if [ -n "${LAB:-}" ]; then name="secondhit + lab"; elif [ -n "${FLASH:-}" ]; then name="secondhit from flash"; elif [ -n "${NO_SENDFILE:-}" ]; then name="sendfile off"; else name="baseline"; fi ;;
    esac
    summary+=$(awk -v p="$port" -v sc="$scenario" -v name="$name" "$MEDIAN"'
      function ms(x) { if (x ~ /us$/) return x / 1000; if (x ~ /ms$/) return x + 0; if (x ~ /s$/) return x * 1000; return x + 0 }
      { rps[$1, $2] = $3; cpu[$1, $2] = $4; p99[$1, $2] = ms($5); err[$1, $2] += $6; if ($1 > rounds) rounds = $1 }
      END {
        for (r = 1; r <= rounds; r++) { a[r] = rps[r, p]; c[r] = cpu[r, p]; l[r] = p99[r, p]; q[r] = rps[r, p] / rps[r, 18082]; e += err[r, p] }
        mr = median(a, rounds); mc = median(c, rounds); ml = median(l, rounds); mq = median(q, rounds)
        printf "| %s | %s | %.0f | %.2f ms | %.1f | %d | %s |\n", sc, name, mr, ml, mc, e, (p == 18082 ? "1" : sprintf("%.2f", mq)) }' "$dir/results")$'\n'
  done
done
if [ -n "$summary" ]; then
  echo
  echo "Medians over $RUNS rounds (each round runs every cache once, in turn):"
  echo
  echo '| scenario | cache | requests/s | p99 | CPU us/request | errors (all rounds) | requests/s / nginx |'
  echo '|---|---|---:|---:|---:|---:|---:|'
  printf '%s' "$summary"
fi
if grep -q '^hit_1k ' "$dir/all" && grep -q '^hit_1k_c1000 ' "$dir/all"; then
  echo
  echo "Many connections: hit_1k_c1000 against hit_1k (medians over the rounds; CPU in us a request):"
  echo
  echo '| cache | requests/s at 64 | at 1,000 | 1,000 / 64 | user 64 -> 1,000 | system 64 -> 1,000 | wrk 64 -> 1,000 |'
  echo '|---|---:|---:|---:|---:|---:|---:|'
  for port in $ports; do
    case $port in 18082) name="nginx" ;; 18083) name="secondhit" ;; *) name="baseline" ;; esac
    awk -v p="$port" -v name="$name" "$MEDIAN"'
      $3 == p && ($1 == "hit_1k" || $1 == "hit_1k_c1000") { k = $1; n[k]++; r[k, n[k]] = $4; u[k, n[k]] = $5; s[k, n[k]] = $6; w[k, n[k]] = $7 }
      function m(arr, k,   i, t) { for (i = 1; i <= n[k]; i++) t[i] = arr[k, i]; return median(t, n[k]) }
      END {
        a = "hit_1k"; b = "hit_1k_c1000"
        printf "| %s | %.0f | %.0f | %.2f | %.1f -> %.1f | %.1f -> %.1f | %.1f -> %.1f |\n", name, m(r, a), m(r, b), m(r, b) / m(r, a),
          m(u, a), m(u, b), m(s, a), m(s, b), m(w, a), m(w, b) }' "$dir/all"
  done
fi
if [ -n "$fills" ]; then
  echo
  echo '| fill_1k | entries | cache_bytes MiB | bytes an entry | RSS MiB | RSS / cache_bytes | goal (1.2 x cache_bytes + 64 MiB) / RSS |'
  echo '|---|---:|---:|---:|---:|---:|---:|'
  printf '%s' "$fills"
fi
if [ -n "${ACCESS_LOG:-}" ]; then
  echo
  echo "access log lines: nginx $(wc -l < "$dir/logs/nginx-access.log"), secondhit $(wc -l < "$dir/logs/secondhit-access.log")"
  curl -s http://127.0.0.1:18093/metrics | grep '^secondhit_access_log_dropped_total' || true; echo
fi

if [ -n "${ICOUNT:-}" ]; then
  command -v valgrind >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind >/dev/null; }
  cat > "$dir/icount.conf" <<NGINX
worker_processes 1;
master_process off;
daemon off;
pid $dir/icount-nginx.pid;
error_log $dir/logs/icount-error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  keepalive_requests 1000000;
  proxy_cache_path $dir/cache-icount levels=1:2 keys_zone=i:64m max_size=256m inactive=1h use_temp_path=off;
  upstream origin { server 127.0.0.1:18081; keepalive 64; }
  server {
    listen 127.0.0.1:18085;
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache i;
      proxy_cache_min_uses 2;
    }
  }
}
NGINX
  mkdir -p "$dir/cache-icount"; chmod 777 "$dir/cache-icount"
  # Instructions per request: counters zeroed after a warm-up, dumped after a timed run.
  icount() {  # name port scenario -- command...
    local name=$1 port=$2 scenario=$3; shift 4
    valgrind --tool=callgrind --callgrind-out-file="$dir/cg.$port.%p" "$@" 2>"$dir/logs/valgrind-$port.log" &
    local pid=$!
    for _ in $(seq 1 120); do curl -s -o /dev/null "http://127.0.0.1:$port/obj-1k" && break; sleep 0.5; done
    local args=() path=/obj-1k
    [ "$scenario" = miss_1k ] && args=(-s "$dir/unique.lua") && path=/obj-1k?u=icount
    wrk -t1 -c16 -d3s "${args[@]}" "http://127.0.0.1:$port$path" -- "icount-warm-$port" >/dev/null
    callgrind_control -z "$pid" >/dev/null 2>&1
    local n
    n=$(wrk -t1 -c16 -d6s "${args[@]}" "http://127.0.0.1:$port$path" -- "icount-$port" | awk '/requests in/{print $1}')
    callgrind_control -d "$pid" >/dev/null 2>&1
    sleep 1
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
    local ir
    ir=$(awk '/^summary:/{s = $2} END{print s + 0}' "$dir/cg.$port.$pid.1")
    rm -f "$dir"/cg.$port.*
    printf '| %s | %s | %d | %d |\n' "$scenario" "$name" "$n" $((ir / n))
  }
  echo
  echo "User-space instructions per request (callgrind):"
  echo
  echo '| scenario | cache | requests counted | instructions / request |'
  echo '|---|---|---:|---:|'
  for scenario in miss_1k hit_1k; do
    icount "nginx proxy_cache, min_uses 2" 18085 $scenario -- nginx -p "$dir" -c "$dir/icount.conf"
    icount "secondhit serve" 18086 $scenario -- "$bin" serve --origin http://127.0.0.1:18081 \
      --listen 127.0.0.1:18086 --admin-listen 127.0.0.1:18096 --log-level warn --workers 1
    if [ -n "${BASELINE:-}" ] && [ -z "${LAB:-}" ] && [ -z "${FLASH:-}" ]; then
      icount "baseline" 18087 $scenario -- "$BASELINE" serve --origin http://127.0.0.1:18081 \
        --listen 127.0.0.1:18087 --admin-listen 127.0.0.1:18097 --log-level warn --workers 1
    fi
  done
fi
