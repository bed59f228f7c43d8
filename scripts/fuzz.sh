#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (default 60 s each) with libFuzzer via cargo-fuzz.
# The stable toolchain is enough: RUSTC_BOOTSTRAP lets cargo-fuzz pass its -Z flags.
# Findings land in fuzz/artifacts/<target>/; turn each into a regression test.
#
# usage: scripts/fuzz.sh [SECONDS_PER_TARGET]
set -eu  # no pipefail: `head` closing a decompressor early is expected
cd "$(dirname "$0")/../fuzz"
secs=${1:-60}
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1
# Seeds: the start of each real trace, decompressed.
mkdir -p corpus/trace_readers
for t in ../traces/request.trace.xz ../traces/trace-mt-20130703.trc.bin.gz; do
  case $t in *.xz) xzcat "$t";; *.gz) zcat "$t";; esac | head -c 4096 > "corpus/trace_readers/$(basename "$t").seed"
done
[ -d ../../shared/traces ] && {
  bzcat ../../shared/traces/cloud_photos-sample.bz2 | head -c 4096 > corpus/trace_readers/photos.seed
  head -c 4800 ../../shared/traces/cloudPhysicsIO.oracleGeneral.bin > corpus/trace_readers/oracle.seed
}
mkdir -p corpus/config && cp ../secondhit.example.toml corpus/config/
# origin_h1: a flags byte (bit 0: the request was a HEAD), then what the origin sends.
mkdir -p corpus/origin_h1
printf '\0HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello' > corpus/origin_h1/length.seed
printf '\0HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;e=1\r\nhello\r\n0\r\nX-T: t\r\n\r\n' > corpus/origin_h1/chunked.seed
printf '\0HTTP/1.0 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello' > corpus/origin_h1/repeated-length.seed
printf '\1HTTP/1.1 304 Not Modified\r\nETag: "x"\r\n\r\nHTTP/1.1 200 OK\r\n\r\nto the close' > corpus/origin_h1/stray.seed
for target in trace_readers cache_rules range config authority vary_key snapshot origin_h1; do
  mkdir -p "corpus/$target"
  echo "== $target: ${secs} s"
  cargo fuzz run -O "$target" "corpus/$target" -- -max_total_time="$secs" -rss_limit_mb=2048 2>&1 \
    | grep -E "Done [0-9]+ runs|ERROR|panicked|SUMMARY|^#[0-9]+.*DONE" | tail -3 || true
done
found=$(find artifacts -type f 2>/dev/null | wc -l)
if [ "$found" -gt 0 ]; then find artifacts -type f; echo "$found findings"; exit 1; else echo "no findings"; fi
