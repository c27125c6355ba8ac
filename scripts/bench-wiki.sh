#!/usr/bin/env bash
# Serves one docs page from `netcl serve` and the same page, exported by `netcl export`, from nginx, both on
# loopback, and loads each with wrk side by side: requests per second, p99 latency and their ratio; then the
# resident memory of `netcl serve` before and after a longer load.
#
# Usage: scripts/bench-wiki.sh            (needs: wrk, nginx, curl; builds netcl in release mode)
# Settings by environment: PAGE (content path, default concepts/autotune), THREADS (2), CONNS (64),
# DURATION (10s), SOAK (60, seconds of the memory run; 0 skips it), NETCL_PORT (18080), NGINX_PORT (18081).
set -euo pipefail

PAGE=${PAGE:-concepts/autotune}
THREADS=${THREADS:-2}
CONNS=${CONNS:-64}
DURATION=${DURATION:-10s}
SOAK=${SOAK:-60}
NETCL_PORT=${NETCL_PORT:-18080}
NGINX_PORT=${NGINX_PORT:-18081}

for tool in wrk nginx curl; do
  command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install wrk nginx-light curl)" >&2; exit 1; }
done

cd "$(dirname "$0")/.."
cargo build --release --bin netcl >&2
netcl=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/release/netcl

work=$(mktemp -d)
chmod 755 "$work"  # nginx workers run as an unprivileged user
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$netcl" export "$work/site" >&2

cat > "$work/nginx.conf" <<CONF
worker_processes auto;
daemon off;
pid $work/nginx.pid;
error_log $work/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  include /etc/nginx/mime.types;
  default_type application/octet-stream;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  keepalive_timeout 65;
  client_body_temp_path $work/nginx-body;
  server {
    listen 127.0.0.1:$NGINX_PORT;
    root $work/site;
    index index.html;
  }
}
CONF
nginx -c "$work/nginx.conf" -p "$work" &
pids+=($!)
NETCL_LOG=warn "$netcl" serve --bind "127.0.0.1:$NETCL_PORT" &
netcl_pid=$!
pids+=($netcl_pid)

netcl_url="http://127.0.0.1:$NETCL_PORT/docs/$PAGE"
nginx_url="http://127.0.0.1:$NGINX_PORT/$PAGE/index.html"
for url in "$netcl_url" "$nginx_url"; do
  for _ in $(seq 100); do curl -fso /dev/null "$url" && break; sleep 0.1; done
  curl -fso /dev/null "$url" || { echo "no answer from $url" >&2; exit 1; }
done
echo "page bytes: netcl $(curl -s "$netcl_url" | wc -c), nginx $(curl -s "$nginx_url" | wc -c)"

rss_kib() { ps -o rss= -p "$1" | tr -d ' '; }

# One wrk run; prints "requests_per_second p99".
load() {
  local out
  out=$(wrk --latency -t"$THREADS" -c"$CONNS" -d"$2" "$1")
  local rps p99
  rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
  local errors
  errors=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out")
  [ -z "$errors" ] || echo "wrk reported: $errors" >&2
  echo "$rps $p99"
}

# Warm both up, then measure each once, alternating.
load "$netcl_url" 2s >/dev/null
load "$nginx_url" 2s >/dev/null
read -r netcl_rps netcl_p99 < <(load "$netcl_url" "$DURATION")
read -r nginx_rps nginx_p99 < <(load "$nginx_url" "$DURATION")

printf '\n%-14s %14s %10s\n' "server" "requests/s" "p99"
printf '%-14s %14s %10s\n' "netcl serve" "$netcl_rps" "$netcl_p99"
printf '%-14s %14s %10s\n' "nginx" "$nginx_rps" "$nginx_p99"
awk -v a="$netcl_rps" -v b="$nginx_rps" 'BEGIN { printf "ratio netcl/nginx: %.2f\n", a / b }'
echo "load: wrk -t$THREADS -c$CONNS -d$DURATION, keep-alive, loopback, $(nproc) cores"

if [ "$SOAK" -gt 0 ]; then
  before=$(rss_kib "$netcl_pid")
  load "$netcl_url" "${SOAK}s" >/dev/null
  after=$(rss_kib "$netcl_pid")
  echo "netcl serve RSS: ${before} KiB before, ${after} KiB after ${SOAK}s of load"
fi
