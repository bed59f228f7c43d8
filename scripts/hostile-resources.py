#!/usr/bin/env python3
"""The resource attacks of docs/reliability.md at full size, against the release binary on loopback.

Starts `secondhit origin` and `secondhit serve` (defaults: 4,096 connections, 10 s header
timeout), then:
  1. silent: opens 4,096 TCP connections that never send a byte, checks a normal client is
     still served once they are closed, and times how long the proxy takes to close them;
  2. slow readers: N clients each read 100 KB of a 50 MB response, then stop reading;
     reports the serve process's resident memory before and while they hold on;
  3. abandoned: 30 clients close after 100 bytes of 50 MB objects; reports the body bytes
     the origin sent (its /_stats), then again 2 s later.

usage: scripts/hostile-resources.py [SLOW_READERS]   (default 200; run from the repository)
Every wait is bounded; every server listens on 127.0.0.1 and is stopped at the end.
"""
import json
import os
import resource
import socket
import subprocess
import sys
import time
import urllib.request

BIN = "target/release/secondhit"
ORIGIN, PROXY, ADMIN = 18181, 18182, 18183


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def wait_port(port, seconds=10):
    end = time.time() + seconds
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"nothing listens on {port}")


def get(path, port=PROXY, read=None, rcvbuf=None):
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: bench.test\r\n\r\n".encode())
    got = b""
    while read is not None and len(got) < read:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    return s, got


def origin_bytes():
    with urllib.request.urlopen(f"http://127.0.0.1:{ORIGIN}/_stats", timeout=5) as r:
        return json.load(r)["bytes"]


def main():
    slow = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
    procs = [
        subprocess.Popen([BIN, "origin", "--listen", f"127.0.0.1:{ORIGIN}"], stderr=subprocess.DEVNULL),
        subprocess.Popen(
            [BIN, "serve", "--listen", f"127.0.0.1:{PROXY}", "--admin-listen", f"127.0.0.1:{ADMIN}",
             "--origin", f"http://127.0.0.1:{ORIGIN}", "--log-level", "error"],
            stderr=subprocess.DEVNULL,
        ),
    ]
    try:
        wait_port(ORIGIN)
        wait_port(PROXY)
        serve = procs[1].pid
        print(f"| run | figure |\n|---|---|")
        # 1. silent connections
        silent = [socket.create_connection(("127.0.0.1", PROXY)) for _ in range(4096)]
        start = time.time()
        for s in silent:
            s.settimeout(max(0.1, 15 - (time.time() - start)))
        closed = 0
        for s in silent:
            try:
                if s.recv(1) == b"":
                    closed += 1
            except OSError:
                closed += 1
        took = time.time() - start
        for s in silent:
            s.close()
        s, head = get("/after-silent?size=100", read=100)
        s.close()
        print(f"| 4,096 silent connections | {closed:,} closed by the proxy after {took:.1f} s (header timeout 10 s); a normal client then served: {head[:12].decode(errors='replace')} |")
        # 2. slow readers
        before = rss_mib(serve)
        readers = [get(f"/slow{i}?size=50000000", read=100_000, rcvbuf=65536)[0] for i in range(slow)]
        time.sleep(3)
        held = rss_mib(serve)
        print(f"| {slow} slow readers of 50 MB | serve resident memory {before:.0f} MiB before, {held:.0f} MiB while they hold on (+{held - before:.0f} MiB, {1024 * (held - before) / slow:.0f} KiB each) |")
        for r in readers:
            r.close()
        time.sleep(1)
        # 3. abandoned downloads
        start_bytes = origin_bytes()
        for i in range(30):
            s, _ = get(f"/gone{i}?size=50000000", read=100)
            s.close()
        time.sleep(2)
        sent = origin_bytes() - start_bytes
        time.sleep(2)
        later = origin_bytes() - start_bytes
        print(f"| 30 downloads of 50 MB abandoned after 100 bytes | origin sent {sent / 1e6:.0f} MB, {later / 1e6:.0f} MB 2 s later (the whole objects: 1,500 MB) |")
        print(f"| after all that | serve resident memory {rss_mib(serve):.0f} MiB |")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    main()
