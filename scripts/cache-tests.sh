#!/usr/bin/env bash
# Runs the independent HTTP cache test suite (http-tests/cache-tests, the npm package
# http-cache-tests, BSD-3-Clause, fetched here and never committed) against `secondhit serve`,
# and prints how many required behaviours pass and fail and how many optimal ones pass, beside
# the results the suite ships for nginx, Varnish, Squid, Apache Traffic Server, Apache httpd and
# Fastly (from the suite's own runs, not this machine's).
#
# usage: scripts/cache-tests.sh [EXTRA SERVE FLAGS...]
#   CACHE_TESTS_DIR=DIR runs a checkout of the suite's repository instead of the npm package
#   (the repository moves ahead of the package: CDN-Cache-Control, interim responses, and the
#   newer Age expectations are only there); it is copied, never changed.
#   The suite tags every request with its own fields (Req-Num, Test-ID) and varies on invented
#   ones (Foo, Bar), which serve's default allow-list of forwarded request fields drops by
#   design; the run therefore uses --forwarded-request-headers '*'. Needs node and npm.
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.4.5
work=target/cache-tests
mkdir -p "$work"
engine=
if [ -n "${CACHE_TESTS_DIR:-}" ]; then
  # A checkout: the engine sits in test-engine/ (the package has it at the top).
  rm -rf "$work/package"
  mkdir -p "$work/package"
  cp -r "$CACHE_TESTS_DIR/tests" "$CACHE_TESTS_DIR/results" "$CACHE_TESTS_DIR/test-engine" \
    "$CACHE_TESTS_DIR/package.json" "$work/package/"
  engine=test-engine/
fi
if [ ! -d "$work/package" ]; then
  (cd "$work" && npm pack --silent "http-cache-tests@$version" >/dev/null && tar xzf "http-cache-tests-$version.tgz")
fi
if [ ! -f "$work/package/.installed" ]; then
  (cd "$work/package" && npm install --silent --omit=dev --no-audit --no-fund >/dev/null && touch .installed)
fi
cargo build --release --quiet
origin_port=18600 proxy_port=18601 admin_port=18602
(cd "$work/package" && npm_config_protocol=http npm_config_port=$origin_port \
  npm_config_pidfile="$PWD/../server.pid" node ${engine}server/server.mjs >"../server.log" 2>&1) &
origin=$!
target/release/secondhit serve --origin "http://127.0.0.1:$origin_port" \
  --listen "127.0.0.1:$proxy_port" --admin-listen "127.0.0.1:$admin_port" \
  --policy admit-all --forwarded-request-headers '*' --log-level error "$@" &
proxy=$!
trap 'kill $proxy $origin 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  curl -s -o /dev/null "http://127.0.0.1:$proxy_port/" && curl -s -o /dev/null "http://127.0.0.1:$origin_port/" && break
  sleep 0.1
done
(cd "$work/package" && npm_config_base="http://127.0.0.1:$proxy_port" npm_config_id= npm_package_config_id= timeout 900 \
  node --no-warnings ${engine}cli.mjs >"../secondhit.json" 2>"../cli.log") || true
# The suite's own results for other caches sit in its results/ directory.
cat >"$work/summary.mjs" <<'JS'
import fs from 'fs'
const dir = process.argv[2]
const index = (await import(`${dir}/package/tests/index.mjs`)).default
// The package lists Surrogate-Control's tests apart; a checkout may not have them.
if (fs.existsSync(`${dir}/package/tests/surrogate-control.mjs`)) {
  index.push((await import(`${dir}/package/tests/surrogate-control.mjs`)).default)
}
const tests = index.flatMap(s => s.tests)
function summary (results) {
  const c = { req_pass: 0, req_fail: 0, opt_pass: 0, not_run: 0 }
  const failed = []
  for (const t of tests) {
    const r = results[t.id]
    const kind = t.kind || 'required'
    if (r === undefined) { c.not_run++; continue }
    // A test whose prerequisite did not pass says nothing by itself (the suite shows it grey).
    if ((t.depends_on || []).some(d => results[d] !== true)) continue
    if (kind === 'required' && r === true) c.req_pass++
    if (kind === 'required' && Array.isArray(r) && r[0] === 'Assertion') { c.req_fail++; failed.push(t.id) }
    if (kind === 'optimal' && r === true) c.opt_pass++
  }
  return [c, failed]
}
const rows = [['secondhit serve (this run)', `${dir}/secondhit.json`]]
for (const name of ['nginx', 'varnish', 'squid', 'trafficserver', 'apache', 'fastly', 'caddy', 'haproxy']) {
  const file = `${dir}/package/results/${name}.json`
  if (fs.existsSync(file)) rows.push([`${name} (the suite's published run)`, file])
}
console.log('| cache | required: pass | required: fail | optimal: pass |')
console.log('|---|---:|---:|---:|')
let ours = []
for (const [name, file] of rows) {
  const [c, failed] = summary(JSON.parse(fs.readFileSync(file)))
  if (!ours.length) ours = failed
  console.log(`| ${name} | ${c.req_pass} | ${c.req_fail} | ${c.opt_pass} |`)
}
console.log(`\nsecondhit's required failures: ${ours.join(', ') || 'none'}`)
JS
node "$work/summary.mjs" "$PWD/$work"
