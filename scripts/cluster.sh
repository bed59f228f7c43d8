#!/usr/bin/env bash
# Scale-out behind a real consistent-hash balancer. Starts `secondhit origin`, N `secondhit
# serve` nodes on loopback (each with capacity CAPACITY / N: the same total memory, and each
# recording its lookups with --record), and nginx in front (`hash $scheme$host$request_uri
# consistent`: deploy/nginx-consistent-hash.conf) or haproxy (BALANCER=haproxy: `balance uri
# whole` + `hash-type consistent`: deploy/haproxy.cfg). Then:
#
#   1. replays the trace's first WARM requests through the balancer and prints each node's and
#      the cluster's hit ratio, the origin offload and requests/s, and beside the cluster's what
#      `simulate --nodes N` predicts for the same requests and the same total memory;
#   2. (N > 1) replays the next PARTS x PART requests in parts, kills one node (SIGKILL) early
#      in the first part, and prints each part's hit ratio beside what the cluster without the
#      stop would have had (simulated), which shows the dip and the recovery, and errors; then, from the nodes' recordings, the share of keys that moved to another node
#      (about 1/N is the point of consistent hashing) and whether any other key moved (none
#      should).
#
# With SHIELDS=M (1 or more), a shield tier sits between the nodes and the origin: M more
# `secondhit serve` caches (SHIELD_CAPACITY in all, default twice CAPACITY; SHIELD_POLICY,
# default admit-all: the nodes keep one-hit wonders out of memory, the shield stores every
# object it is asked for once, so that a second request no longer reaches the origin), and each node's
# origin is the group of them (`balance = "hash"` on the cache key, `fallback` to the origin
# when no shield is left). The first table then also gives the requests that reached the
# origin, beside what `simulate --nodes N --shield-nodes M` predicts and beside the nodes
# alone (`simulate --nodes N`, no shield); in step 2 a shield, not a node, is killed, and each
# part gives the errors (the nodes fail over to the other shields or the origin: none) and the
# origin's requests.
#
# Bounded: WARM + PARTS x PART requests (default 30,000 + 10 x 3,000 of the bundled trace).
# Everything listens on 127.0.0.1 (ports BASE..BASE+199).
#
# usage: scripts/cluster.sh [N]                (default 3; installs nginx/haproxy if missing)
#        SHIELDS=2 scripts/cluster.sh 3
#        BALANCER=haproxy scripts/cluster.sh 3
#        TRACE=... CAPACITY=16777216 CONCURRENCY=32 WARM=30000 PART=3000 scripts/cluster.sh 2
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-3}
BALANCER=${BALANCER:-nginx}
TRACE=${TRACE:-traces/request.trace.xz}
CAPACITY=${CAPACITY:-16777216} # bytes, the cluster's total
CONCURRENCY=${CONCURRENCY:-32}
WARM=${WARM:-30000}
PART=${PART:-3000}
PARTS=${PARTS:-10}
BASE=${BASE:-18080}
SHIELDS=${SHIELDS:-0}
SHIELD_CAPACITY=${SHIELD_CAPACITY:-$((2 * CAPACITY))}
SHIELD_POLICY=${SHIELD_POLICY:-admit-all}
[[ "$SHIELDS" =~ ^[0-9]+$ ]] || { echo "SHIELDS must be a number, not $SHIELDS" >&2; exit 2; }
case "$BALANCER" in nginx | haproxy) ;; *) echo "BALANCER must be nginx or haproxy" >&2; exit 2 ;; esac
[[ "$N" =~ ^[1-9][0-9]*$ ]] || { echo "N must be a positive number, not $N" >&2; exit 2; }
command -v "$BALANCER" >/dev/null || command -v "/usr/sbin/$BALANCER" >/dev/null || {
  apt-get update -qq && apt-get install -y -qq "$BALANCER" >/dev/null
}
command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl >/dev/null; }
export PATH="$PATH:/usr/sbin"
cargo build --release --quiet
bin=target/release/secondhit

dir=$(mktemp -d)
chmod 755 "$dir"
mkdir -p "$dir/logs"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

origin_port=$((BASE + 99))
lb_port=$BASE
node_port() { echo $((BASE + $1)); }
admin_port() { echo $((BASE + 100 + $1)); }
node_capacity=$((CAPACITY / N))

"$bin" origin --listen "127.0.0.1:$origin_port" --max-age 86400 >"$dir/logs/origin.log" 2>&1 &
pids+=($!)
# The shields (ports BASE+50.., admin BASE+150..) and the nodes' origin group of them.
shield_port() { echo $((BASE + 50 + $1)); }
declare -A shield_pid
node_origin=(--origin "http://127.0.0.1:$origin_port")
if [ "$SHIELDS" -gt 0 ]; then
  list=""
  for j in $(seq 1 "$SHIELDS"); do
    "$bin" serve --listen "127.0.0.1:$(shield_port "$j")" --admin-listen "127.0.0.1:$((BASE + 150 + j))" \
      --origin "http://127.0.0.1:$origin_port" --capacity "$((SHIELD_CAPACITY / SHIELDS))" \
      --policy "$SHIELD_POLICY" --window inf \
      --log-level warn >"$dir/logs/shield$j.log" 2>&1 &
    shield_pid[$j]=$!
    pids+=($!)
    list+="${list:+, }\"http://127.0.0.1:$(shield_port "$j")\""
  done
  cat >"$dir/node.toml" <<TOML
origin = "shield"
[origins.shield]
servers = [$list]
balance = "hash"
fallback = "origin"
[origins.origin]
servers = ["http://127.0.0.1:$origin_port"]
TOML
  node_origin=(--config "$dir/node.toml")
fi
declare -A node_pid
for i in $(seq 1 "$N"); do
  "$bin" serve "${node_origin[@]}" --listen "127.0.0.1:$(node_port "$i")" --admin-listen "127.0.0.1:$(admin_port "$i")" \
    --capacity "$node_capacity" \
    --record "$dir/node$i.oracleGeneral" --record-format oracle-general --log-level warn >"$dir/logs/node$i.log" 2>&1 &
  node_pid[$i]=$!
  pids+=($!)
done

# The balancer, rendered from the deploy file with this run's nodes and port.
servers=""
for i in $(seq 1 "$N"); do
  if [ "$BALANCER" = nginx ]; then
    servers+="        server 127.0.0.1:$(node_port "$i") max_fails=1 fail_timeout=10s;\n"
  else
    servers+="    server node$i 127.0.0.1:$(node_port "$i") weight 10 check inter 1s fall 1 rise 2\n"
  fi
done
render() { # template, then the listen line's pattern
  awk -v servers="$servers" '
    /# nodes:begin/ { print; printf "%s", servers; skip = 1; next }
    /# nodes:end/ { skip = 0 }
    !skip { print }' "$1" | sed "s/127.0.0.1:8080/127.0.0.1:$lb_port/"
}
if [ "$BALANCER" = nginx ]; then
  render deploy/nginx-consistent-hash.conf >"$dir/lb.conf"
  nginx -p "$dir" -c "$dir/lb.conf" -g 'daemon off;' >"$dir/logs/lb.log" 2>&1 &
else
  render deploy/haproxy.cfg >"$dir/lb.cfg"
  haproxy -f "$dir/lb.cfg" -db >"$dir/logs/lb.log" 2>&1 &
fi
pids+=($!)

wait_for() { # url
  for _ in $(seq 1 100); do
    curl -sf -o /dev/null "$1" && return 0
    sleep 0.1
  done
  echo "no answer from $1; logs:" >&2
  tail -n 5 "$dir"/logs/*.log >&2
  exit 1
}
wait_for "http://127.0.0.1:$origin_port/_stats"
for i in $(seq 1 "$N"); do wait_for "http://127.0.0.1:$(admin_port "$i")/healthz"; done
for j in $(seq 1 "$SHIELDS"); do wait_for "http://127.0.0.1:$((BASE + 150 + j))/healthz"; done
for _ in $(seq 1 50); do
  curl -s -o /dev/null "http://127.0.0.1:$lb_port/warmup-probe?size=1" && break
  sleep 0.1
done

metric() { # node, metric line prefix -> value (0 if absent)
  curl -s "http://127.0.0.1:$(admin_port "$1")/metrics" |
    awk -v m="$2" 'index($0, m) == 1 { v += $NF } END { print v + 0 }'
}
json() { # file, python expression on `r`
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1"
}
logged() { # name, command...: its output to logs/name.log; on failure, say so and show it
  local name=$1
  shift
  if ! "$@" >"$dir/logs/$name.log" 2>&1; then
    echo "$name failed: $*" >&2
    tail -n 20 "$dir/logs/$name.log" >&2
    return 1
  fi
}

echo "cluster: $N node(s) behind $BALANCER, $(numfmt --to=iec "$CAPACITY") in total ($(numfmt --to=iec "$node_capacity") each), trace $TRACE"
if [ "$SHIELDS" -gt 0 ]; then
  echo "shield tier: $SHIELDS cache(s), $(numfmt --to=iec "$SHIELD_CAPACITY") in total, $SHIELD_POLICY, by consistent hash of the key, falling back to the origin"
fi
origin_requests() { curl -s "http://127.0.0.1:$origin_port/_stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"])'; }
origin_before=$(origin_requests)
echo
logged warm-replay "$bin" replay --trace "$TRACE" --target "http://127.0.0.1:$lb_port" \
  --limit "$WARM" --concurrency "$CONCURRENCY" --origin-stats "http://127.0.0.1:$origin_port/_stats" \
  --json "$dir/warm.json" || exit 1
predict() { # requests -> the simulated cluster's hits over the trace's first that many
  logged simulate "$bin" simulate --trace "$TRACE" --limit "$1" --policy second-hit \
    --capacity "$CAPACITY" --nodes "$N" --window inf --json "$dir/predicted.json" || exit 1
  json "$dir/predicted.json" "r['results'][0]['hits']"
}
printf '%-8s %10s %10s\n' node requests hit
for i in $(seq 1 "$N"); do
  hits=$(metric "$i" 'secondhit_requests_total{outcome="hit"}')
  all=$(metric "$i" 'secondhit_requests_total{')
  printf '%-8s %10s %9.2f%%\n' "node$i" "$all" "$(python3 -c "print(100 * $hits / max($all, 1))")"
done
predicted=$(predict "$WARM")
if [ "$SHIELDS" -gt 0 ]; then
  # What reached the origin, live and predicted, with the shield tier and without it.
  live_origin=$(( $(origin_requests) - origin_before ))
  logged simulate-shield "$bin" simulate --trace "$TRACE" --limit "$WARM" --policy second-hit \
    --capacity "$CAPACITY" --nodes "$N" --window inf --shield-nodes "$SHIELDS" \
    --shield-capacity "$SHIELD_CAPACITY" --shield-policy "$SHIELD_POLICY" --json "$dir/shield.json" || exit 1
  echo "origin requests: $live_origin live with the shield tier; predicted $(json "$dir/shield.json" "r['results'][0]['shield']['origin_requests']") (simulate --nodes $N --shield-nodes $SHIELDS); without a shield tier $((WARM - predicted)) predicted (the nodes' misses)"
fi
printf '%-8s %10s %9.2f%%   predicted (simulate --nodes %s) %.2f %%; origin offload %.2f %%, %.0f requests/s, p99 %.2f ms, errors %s\n' total \
  "$(json "$dir/warm.json" "r['requests']")" "$(json "$dir/warm.json" "100 * r['hit_ratio']")" "$N" \
  "$(python3 -c "print(100 * $predicted / $WARM)")" \
  "$(json "$dir/warm.json" "100 * (r.get('origin_offload') or 0)")" \
  "$(json "$dir/warm.json" "r['requests_per_sec']")" \
  "$(json "$dir/warm.json" "r['latency_ms']['p99']")" \
  "$(json "$dir/warm.json" "r['errors']")"

[ "$N" -gt 1 ] || [ "$SHIELDS" -gt 0 ] || exit 0

if [ "$SHIELDS" -gt 0 ]; then
  # A shield killed early in part 1: the nodes fail over (the dead shield's keys go to the next
  # shield on the ring, or to the origin with none left); the clients see no error.
  echo
  echo "shield$SHIELDS killed (SIGKILL) early in part 1; the next $((PARTS * PART)) requests in parts of $PART:"
  printf '%-6s %10s %10s %16s %8s\n' part requests hit "origin requests" errors
  for k in $(seq 0 $((PARTS - 1))); do
    at=$(origin_requests)
    logged "part$k" "$bin" replay --trace "$TRACE" --target "http://127.0.0.1:$lb_port" \
      --skip $((WARM + k * PART)) --limit "$PART" --concurrency "$CONCURRENCY" \
      --json "$dir/part$k.json" &
    replay=$!
    pids+=("$replay")
    if [ "$k" = 0 ]; then
      sleep 0.3
      { kill -KILL "${shield_pid[$SHIELDS]}" && wait "${shield_pid[$SHIELDS]}"; } 2>/dev/null || true
    fi
    wait "$replay" || exit 1
    printf '%-6s %10s %9.2f%% %16s %8s\n' $((k + 1)) "$(json "$dir/part$k.json" "r['requests']")" \
      "$(json "$dir/part$k.json" "100 * r['hit_ratio']")" "$(( $(origin_requests) - at ))" \
      "$(json "$dir/part$k.json" "r['errors']")"
  done
  echo
  echo "node1's view of the shield group after the stop (/origins):"
  curl -s "http://127.0.0.1:$(admin_port 1)/origins" >"$dir/origins.json"
  python3 - "$dir/origins.json" <<'PY'
import json, sys
for g in json.load(open(sys.argv[1]))["groups"]:
    for s in g["servers"]:
        print("  %-7s %-24s up=%-5s requests=%-7d errors=%-4d ejections=%d"
              % (g["name"], s["url"], s["up"], s["requests"], s["errors"], s["ejections"]))
PY
  exit 0
fi

# Where each node's recording stood before the stop (the queue drains within milliseconds).
sleep 1
declare -A before
for i in $(seq 1 "$N"); do before[$i]=$(metric "$i" 'secondhit_record_records_total'); done
gone=$N
echo
echo "node$gone killed (SIGKILL) early in part 1; the next $((PARTS * PART)) requests in parts of $PART:"
printf '%-6s %10s %10s %22s %8s\n' part requests hit "predicted, no stop" errors
done_hits=$predicted
for k in $(seq 0 $((PARTS - 1))); do
  logged "part$k" "$bin" replay --trace "$TRACE" --target "http://127.0.0.1:$lb_port" \
    --skip $((WARM + k * PART)) --limit "$PART" --concurrency "$CONCURRENCY" \
    --json "$dir/part$k.json" &
  replay=$!
  pids+=("$replay")
  if [ "$k" = 0 ]; then
    sleep 0.3
    { kill -KILL "${node_pid[$gone]}" && wait "${node_pid[$gone]}"; } 2>/dev/null || true
  fi
  wait "$replay" || exit 1
  upto=$(predict $((WARM + (k + 1) * PART)))
  printf '%-6s %10s %9.2f%% %21.2f%% %8s\n' $((k + 1)) "$(json "$dir/part$k.json" "r['requests']")" \
    "$(json "$dir/part$k.json" "100 * r['hit_ratio']")" \
    "$(python3 -c "print(100 * ($upto - $done_hits) / $PART)")" \
    "$(json "$dir/part$k.json" "r['errors']")"
  done_hits=$upto
done
sleep 1

# Which node each key was recorded on, before and after the stop.
cuts=""
for i in $(seq 1 "$N"); do cuts+="${before[$i]} "; done
python3 - "$dir" "$N" "$gone" $cuts <<'PY'
import struct, sys
d, n, gone = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cuts = [int(c) for c in sys.argv[4:]]
def ids(i):
    data = open(f"{d}/node{i}.oracleGeneral", "rb").read()
    return [struct.unpack_from("<IQIq", data, o)[1] for o in range(0, len(data) // 24 * 24, 24)]
pre, split, post = {}, set(), {}
for i in range(1, n + 1):
    rec = ids(i)
    cut = len(rec) if i == gone else cuts[i - 1]
    for k in rec[:cut]:
        if pre.setdefault(k, i) != i:
            split.add(k)
    if i != gone:
        for k in rec[cut:]:
            post.setdefault(k, set()).add(i)
both = [k for k in post if k in pre]
moved = [k for k in both if pre[k] == gone]
stray = [k for k in both if pre[k] != gone and pre[k] not in post[k]]
owned = sum(1 for v in pre.values() if v == gone)
print()
print(f"keys seen before and after the stop: {len(both)}; moved to another node: {len(moved)} "
      f"({100 * len(moved) / max(len(both), 1):.1f} %, 1/N = {100 / n:.1f} %); "
      f"other keys that moved: {len(stray)}")
print(f"node{gone} had owned {owned} of {len(pre)} keys ({100 * owned / max(len(pre), 1):.1f} %); "
      f"keys seen on two nodes before the stop: {len(split)}")
PY
