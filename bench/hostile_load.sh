#!/bin/bash
# The server under hostile clients, every part in a process of its own: `netcl serve` with CONFIG (which must
# bind 127.0.0.1:PORT), and the load generator of tests/hostile_load.rs (64 readers, 8 stalled event streams and
# 8 byte-a-second requests from 127.0.0.2, one small run a second). Prints the generator's report (page latency
# percentiles, small runs answered) and the server's memory and CPU.
#
#   cargo build --release --bin netcl
#   cargo test --release --test hostile_load --no-run     # prints the test binary's path
#   bench/hostile_load.sh target/release/netcl CONFIG.toml TEST_BINARY [SECONDS=60] [PACE_MS=0]
#
# PACE_MS is each reader's pause between pages (0: as fast as answers come).
set -euo pipefail
netcl=$1; config=$2; generator=$3; secs=${4:-60}; pace=${5:-0}
addr=$(sed -n 's/^bind *= *"\(.*\)"/\1/p' "$config")
[ -n "$addr" ] || { echo "$config sets no bind address" >&2; exit 2; }
log=$(mktemp -d)
"$netcl" serve --config "$config" >"$log/server.log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    curl -s -o /dev/null -H 'Host: localhost' "http://$addr/healthz" && break
    sleep 0.2
done
sleep 1
rss() { awk '/VmRSS/{print int($2/1024)}' "/proc/$1/status"; }
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
rss0=$(rss $server); cpu0=$(cpu $server); peak=$rss0
NETCL_LOAD_ADDR=$addr NETCL_LOAD_SECS=$secs NETCL_LOAD_PACE_MS=$pace \
    "$generator" load_generator --exact --ignored --nocapture >"$log/generator.log" 2>&1 &
gen=$!
while kill -0 $gen 2>/dev/null; do
    sleep 1
    r=$(rss $server); [ "$r" -gt "$peak" ] && peak=$r
done
rss1=$(rss $server); cpu1=$(cpu $server)
workers=0
for p in $(pgrep -P $server || true); do workers=$((workers + $(rss "$p"))); done
grep '^LOAD_REPORT' "$log/generator.log" || { cat "$log/generator.log" >&2; exit 1; }
echo "server RSS MiB: start $rss0, peak $peak, end $rss1; workers' RSS MiB at the end $workers; server CPU s $(( (cpu1 - cpu0) / 100 ))"
