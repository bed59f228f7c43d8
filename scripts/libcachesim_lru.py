#!/usr/bin/env python3
"""Replays an oracleGeneral trace through libCacheSim's LRU (the PyPI package `libcachesim`,
C core) and prints one JSON line: requests, hits, hit ratio, byte hit ratio, seconds.

usage: libcachesim_lru.py TRACE.oracleGeneral.bin CAPACITY_BYTES
"""
import json
import sys
import time

import libcachesim as lcs

path, capacity = sys.argv[1], int(sys.argv[2])
start = time.perf_counter()
reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
cache = lcs.LRU(capacity)
miss_ratio, byte_miss_ratio = cache.process_trace(reader)
seconds = time.perf_counter() - start
n = reader.get_num_of_req() if hasattr(reader, "get_num_of_req") else None
print(json.dumps({
    "requests": n,
    "hit_ratio": 1 - miss_ratio,
    "byte_hit_ratio": 1 - byte_miss_ratio,
    "seconds": seconds,
}))
