# Shared by the bench scripts (sourced, not run): nginx and wrk installed, a directory with a
# 1 KiB object, a static nginx config (the origin), the one nginx cache config every script
# measures against, CPU ticks from /proc, and an awk median.

command -v nginx >/dev/null && command -v wrk >/dev/null || {
  apt-get update -qq && apt-get install -y -qq nginx wrk >/dev/null
}

# Makes $1/www (with obj-1k, 1 KiB of random bytes, readable by nginx's workers) and $1/logs.
www_with_1k() {
  mkdir -p "$1/www" "$1/logs"
  chmod 755 "$1"
  head -c 1024 /dev/urandom > "$1/www/obj-1k"
  chmod -R a+rX "$1/www"
}

# Writes to $1 an nginx config (NGINX_WORKERS workers, default 2; no access log) that serves the
# files of $2 on 127.0.0.1:$3, with pid file $4 and error log $5; any further arguments are added
# to `listen`.
static_nginx_conf() {
  local conf=$1 root=$2 port=$3 pid=$4 errors=$5; shift 5
  cat > "$conf" <<NGINX
worker_processes ${NGINX_WORKERS:-2};
pid $pid;
error_log $errors warn;
worker_rlimit_nofile 65536;
events { worker_connections 8192; }
http {
  access_log off;
  sendfile on;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$port${*:+ $*};
    root $root;
    add_header Cache-Control "public, max-age=3600";
  }
}
NGINX
}

# The peer every caching scenario is measured against, configured once for every script:
# nginx proxy_cache in front of the origin at 127.0.0.1:${ORIGIN_PORT:-18081}, listening on
# 127.0.0.1:$3, storing an object on its $4-th request (2: nginx's own "second hit"; 1: every
# miss), at most $5 bytes in $2/nginx-cache, its pid in file $6. Access log: NGINX_LOG (default
# off); workers: NGINX_WORKERS (default 2).
nginx_cache_conf() {
  local conf=$1 dir=$2 port=$3 min_uses=$4 max_size=$5 pid=$6
  mkdir -p "$dir/nginx-cache" "$dir/logs"
  chmod 777 "$dir/nginx-cache"
  cat > "$conf" <<NGINX
worker_processes ${NGINX_WORKERS:-2};
pid $pid;
error_log $dir/logs/nginx-cache-$port.log warn;
worker_rlimit_nofile 65536;
events { worker_connections 8192; }
http {
  access_log ${NGINX_LOG:-off};
  sendfile on;
  keepalive_requests 1000000;
  # keys_zone: a key a request over rounds of miss_1k fills 64m, and nginx then answers errors.
  # The cache manager removes up to manager_files files an iteration (100 by default, every
  # 50 ms: far fewer than a replay writes, so the cache would stand well above max_size).
  proxy_cache_path $dir/nginx-cache levels=1:2 keys_zone=c:512m max_size=$max_size inactive=1d
                   use_temp_path=off manager_files=100000 manager_sleep=10ms manager_threshold=1000ms;
  upstream origin { server 127.0.0.1:${ORIGIN_PORT:-18081}; keepalive 64; }
  server {
    listen 127.0.0.1:$port backlog=4096;
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache c;
      proxy_cache_min_uses $min_uses;
      # Concurrent misses of a key share one origin fetch, as secondhit's do (coalescing).
      proxy_cache_lock on;
      # What is not cached is not spooled to disk either (only cache writes count).
      proxy_max_temp_file_size 0;
      add_header X-Cache \$upstream_cache_status;
    }
  }
}
NGINX
}

# The peer for large objects: nginx_cache_conf's cache with nginx's slice module in front, as
# its documentation sets it up: each 1 MiB slice a subrequest with its own cache key
# ($slice_range) and its own Range to the origin, stored on its $4-th request, at most $5 bytes
# in $2/nginx-cache; listening on 127.0.0.1:$3, pid in file $6.
nginx_slice_conf() {
  local conf=$1 dir=$2 port=$3 min_uses=$4 max_size=$5 pid=$6
  mkdir -p "$dir/nginx-cache" "$dir/logs"
  chmod 777 "$dir/nginx-cache"
  cat > "$conf" <<NGINX
worker_processes ${NGINX_WORKERS:-2};
pid $pid;
error_log $dir/logs/nginx-slice-$port.log warn;
worker_rlimit_nofile 65536;
events { worker_connections 8192; }
http {
  access_log ${NGINX_LOG:-off};
  sendfile on;
  keepalive_requests 1000000;
  proxy_cache_path $dir/nginx-cache levels=1:2 keys_zone=c:512m max_size=$max_size inactive=1d
                   use_temp_path=off manager_files=100000 manager_sleep=10ms manager_threshold=1000ms;
  upstream origin { server 127.0.0.1:${ORIGIN_PORT:-18081}; keepalive 64; }
  server {
    listen 127.0.0.1:$port backlog=4096;
    location / {
      slice 1m;
      proxy_cache c;
      proxy_cache_key \$uri\$is_args\$args\$slice_range;
      proxy_set_header Range \$slice_range;
      proxy_cache_valid 200 206 1d;
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache_min_uses $min_uses;
      proxy_cache_lock on;
      proxy_max_temp_file_size 0;
      add_header X-Cache \$upstream_cache_status;
    }
  }
}
NGINX
}

# User + system CPU ticks of the processes (a process gone is skipped: nginx's cache loader
# exits after a minute).
stat_ticks() {  # awk expression over /proc/<pid>/stat fields, then pids: the sum
  local expr=$1 t=0; shift
  for p in "$@"; do t=$((t + $(awk "{print $expr}" "/proc/$p/stat" 2>/dev/null || echo 0))); done; echo $t
}
ticks() { stat_ticks '$14 + $15' "$@"; }
user_ticks() { stat_ticks '$14' "$@"; }
hz=$(getconf CLK_TCK)

# awk: the median of a[1..n] (sorts a).
MEDIAN='function median(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
'
