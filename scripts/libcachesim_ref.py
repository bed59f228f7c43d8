#!/usr/bin/env python3
"""Hit counts of libCacheSim's eviction policies (the PyPI package `libcachesim`, C core) on an
oracleGeneral trace, for `secondhit simulate --eviction` to be checked against, request for
request. Prints one JSON line per (policy, capacity): policy, capacity, requests, hits, seconds.

usage: libcachesim_ref.py TRACE.oracleGeneral.bin POLICY[,POLICY...] CAPACITY [CAPACITY...]

POLICY is secondhit's name: lru fifo clock sieve s3fifo arc wtinylfu lfu belady belady-size.
Every policy runs with libCacheSim's defaults (see the README's "Eviction policies" table).
The trace must carry next-access times for belady (`secondhit trace-convert` writes them).
"""
import json
import sys
import time

import libcachesim as lcs

MAKERS = {
    "lru": lambda c: lcs.LRU(c),
    "fifo": lambda c: lcs.FIFO(c),
    "clock": lambda c: lcs.Clock(c),
    "sieve": lambda c: lcs.Sieve(c),
    "s3fifo": lambda c: lcs.S3FIFO(c),
    "arc": lambda c: lcs.ARC(c),
    "wtinylfu": lambda c: lcs.WTinyLFU(c),
    "lfu": lambda c: lcs.LFU(c),
    "belady": lambda c: lcs.Belady(c),
    "belady-size": lambda c: lcs.BeladySize(c),
}


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    path, policies, capacities = sys.argv[1], sys.argv[2].split(","), [int(c) for c in sys.argv[3:]]
    for name in policies:
        if name not in MAKERS:
            sys.exit(f"unknown policy {name!r}: expected one of {', '.join(MAKERS)}")
    for name in policies:
        for capacity in capacities:
            reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
            n = reader.get_num_of_req()
            cache = MAKERS[name](capacity)
            start = time.perf_counter()
            miss_ratio, _ = cache.process_trace(reader)
            seconds = time.perf_counter() - start
            print(json.dumps({
                "policy": name,
                "capacity": capacity,
                "requests": n,
                "hits": n - round(miss_ratio * n),
                "seconds": round(seconds, 3),
            }), flush=True)


if __name__ == "__main__":
    main()
