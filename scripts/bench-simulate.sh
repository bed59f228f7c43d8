#!/usr/bin/env bash
# Simulator speed against libCacheSim (PyPI `libcachesim`, C core), same traces, same machine,
# same run; whole processes, trace reading included. Also checks that both LRUs agree.
#
# usage: scripts/bench-simulate.sh        (needs: cargo, python3; installs libcachesim with pip)
#        POLICIES=1 scripts/bench-simulate.sh
#          every exact eviction against libCacheSim's on one 10 M-request trace (POLICY_LIST,
#          POLICY_REQUESTS pick others), then a 10 x 3 sweep on both cores
#        SCALE=1 scripts/bench-simulate.sh
#          production scale instead: 30 M requests / 17 M objects (720 MB on disk) and
#          200 M requests (4.8 GB), LRU at 1 %, wall time, M req/s and peak RSS of each process
#          (/usr/bin/time), secondhit against libCacheSim; SCALE_REQUESTS="30000000" picks sizes
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/bench-simulate
mkdir -p "$out"
python3 -c 'import libcachesim' 2>/dev/null || pip install --quiet libcachesim
cargo build --release --quiet
bin=target/release/secondhit
# Wall seconds of one whole process.
secs() { python3 -c 'import sys,time,subprocess; t=time.perf_counter(); subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); print(f"{time.perf_counter()-t:.3f}")' "$@"; }

if [ -n "${SCALE:-}" ]; then
  command -v /usr/bin/time >/dev/null || { apt-get update -qq && apt-get install -y -qq time >/dev/null; }
  printf '| trace | requests | objects | tool | hit ratio | wall s | M req/s | peak RSS MB |\n|---|---:|---:|---|---:|---:|---:|---:|\n'
  for n in ${SCALE_REQUESTS:-30000000 200000000}; do
    trace=$out/scale-$n.oracleGeneral.bin
    # The issue's trace: 10 % as many objects as requests, Zipf 0.9, half of the requests one-time.
    [ -f "$trace" ] || $bin gen-trace --out "$trace" --requests "$n" --objects $((n / 10)) \
      --alpha 0.9 --one-time-share 0.5 --seed 7 >/dev/null
    stats=$($bin trace-stats "$trace" --no-distance --json)
    cap=$(echo "$stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["working_set_bytes"] // 100)')
    objects=$(echo "$stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["objects"])')
    measure() {  # prints: wall seconds, peak RSS in MB, then the tool's stdout
      /usr/bin/time -f '%e %M' -o "$out/time.txt" "$@" > "$out/stdout.txt"
      read -r wall kb < "$out/time.txt"
      echo "$wall $((kb / 1024))"
    }
    read -r wall mb <<<"$(measure $bin simulate --trace "$trace" --policy admit-all --capacity "$cap" --json -)"
    hr=$(python3 -c 'import json; r=json.load(open("'"$out"'/stdout.txt"))["results"][0]; print("%.4f %%" % (r["hit_ratio"]*100))')
    printf '| %s | %s | %s | secondhit | %s | %s | %.1f | %s |\n' "$(basename "$trace")" "$n" "$objects" "$hr" "$wall" "$(python3 -c "print($n/$wall/1e6)")" "$mb"
    read -r wall mb <<<"$(measure python3 scripts/libcachesim_lru.py "$trace" "$cap")"
    hr=$(python3 -c 'import json; r=json.load(open("'"$out"'/stdout.txt")); print("%.4f %%" % (r["hit_ratio"]*100))')
    printf '| %s | %s | %s | libCacheSim | %s | %s | %.1f | %s |\n' "$(basename "$trace")" "$n" "$objects" "$hr" "$wall" "$(python3 -c "print($n/$wall/1e6)")" "$mb"
  done
  exit 0
fi

if [ -n "${POLICIES:-}" ]; then
  # Every exact eviction against libCacheSim's, one whole process each, on one 10 M-request
  # trace with next-access times (belady needs them), LRU-style sizing at 1 % of the working set.
  n=${POLICY_REQUESTS:-10000000}
  raw=$out/policies-$n.oracleGeneral.bin
  trace=$out/policies-$n.next.oracleGeneral.bin
  [ -f "$raw" ] || $bin gen-trace --out "$raw" --requests "$n" --objects $((n / 10)) \
    --alpha 0.9 --one-time-share 0.5 --seed 7 >/dev/null
  [ -f "$trace" ] || $bin trace-convert "$raw" --out "$trace" 2>/dev/null
  ws=$($bin trace-stats "$trace" --no-distance --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["working_set_bytes"])')
  cap=$((ws / 100))
  printf '| policy | secondhit s | libCacheSim s | speed-up | secondhit hits | libCacheSim hits |\n|---|---:|---:|---:|---:|---:|\n'
  for p in ${POLICY_LIST:-lru fifo clock sieve s3fifo arc wtinylfu lfu belady belady-size}; do
    s1=$(secs $bin simulate --trace "$trace" --policy admit-all --eviction "$p" --capacity "$cap" --threads 1)
    h1=$($bin simulate --trace "$trace" --policy admit-all --eviction "$p" --capacity "$cap" --json - | python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["hits"])')
    # Both whole processes: ours with its trace reading (and next-access pass), libCacheSim's
    # with Python's start and the trace's opening.
    s2=$(secs python3 scripts/libcachesim_ref.py "$trace" "$p" "$cap")
    h2=$(python3 scripts/libcachesim_ref.py "$trace" "$p" "$cap" 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["hits"])')
    printf '| %s | %s | %s | %.2fx | %s | %s |\n' "$p" "$s1" "$s2" "$(python3 -c "print($s2/$s1)")" "$h1" "$h2"
  done
  s=$(secs $bin simulate --trace "$trace" --policy admit-all --eviction all --capacity-fraction 0.01,0.05,0.1)
  echo
  echo "sweep of 10 evictions x 3 sizes over $n requests, both cores: $s s wall"
  exit 0
fi

# The two traces both tools can read: libCacheSim's own oracleGeneral sample and a 10-million
# request synthetic trace in the same format.
cloud=../shared/traces/cloudPhysicsIO.oracleGeneral.bin
synth=$out/zipf-10M.oracleGeneral.bin
[ -f "$synth" ] || $bin gen-trace --out "$synth" --requests 10000000 --objects 1000000 \
  --alpha 0.8 --one-time-share 0.3 --seed 1
# request.trace.xz as oracleGeneral, each (id, size) pair numbered densely (the key rule of the
# webcachesim format), so that libCacheSim sees the same objects.
web=$out/request.oracleGeneral.bin
[ -f "$web" ] || xzcat traces/request.trace.xz | python3 -c '
import struct, sys
ids = {}
out = sys.stdout.buffer
for line in sys.stdin:
    t, i, s = map(int, line.split())
    k = ids.setdefault((i, s), len(ids))
    out.write(struct.pack("<IQIq", t, k, s, -1))
' > "$web"


printf '| trace | requests | capacity | tool | store | hit ratio | wall s | M req/s (whole process) |\n|---|---:|---:|---|---|---:|---:|---:|\n'
for trace in "$web" "$cloud" "$synth"; do
  ws=$($bin trace-stats "$trace" --no-distance --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["working_set_bytes"], d["requests"])')
  read -r wsb reqs <<<"$ws"
  cap=$((wsb / 100))
  name=$(basename "$trace")
  for store in exact moka; do
    best=999
    for _ in 1 2 3; do s=$(secs $bin simulate --trace "$trace" --policy admit-all --store $store --capacity $cap); best=$(python3 -c "print(min($best,$s))"); done
    hr=$($bin simulate --trace "$trace" --policy admit-all --store $store --capacity $cap --json - | python3 -c 'import json,sys; r=json.load(sys.stdin)["results"][0]; print("%.4f %%" % (r["hit_ratio"]*100))')
    printf '| %s | %s | %s | secondhit | %s | %s | %s | %.1f |\n' "$name" "$reqs" "$cap" "$store" "$hr" "$best" "$(python3 -c "print($reqs/$best/1e6)")"
  done
  best=999
  for _ in 1 2 3; do s=$(secs python3 scripts/libcachesim_lru.py "$trace" $cap); best=$(python3 -c "print(min($best,$s))"); done
  hr=$(python3 scripts/libcachesim_lru.py "$trace" $cap | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.4f %%" % (r["hit_ratio"]*100))')
  printf '| %s | %s | %s | libCacheSim | LRU | %s | %s | %.1f |\n' "$name" "$reqs" "$cap" "$hr" "$best" "$(python3 -c "print($reqs/$best/1e6)")"
done

echo
s=$(secs $bin simulate)
echo "default sweep (secondhit simulate, no options: 9 runs over the bundled trace): $s s wall"
