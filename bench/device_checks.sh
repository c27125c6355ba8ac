#!/usr/bin/env bash
# One call on the GPU machine, as recorded in bench/results/README.md:
#   bench/device_checks.sh BIN_DIR OUT_DIR
# BIN_DIR holds netcl-new, netcl-old (the build to compare against) and test binaries t-NAME.
# 1. PoCL restricted to 2 cores, every cache empty: wall time of `netcl run bench/cold-snippet.rhai`, 3 times.
# 2. Steady state of CASES: each build tunes once (sync, its own caches), then ROUNDS alternating rounds of
#    --reps 20 with the caches warm (ROUNDS=0 skips this step).
# 3. First contact of FIRST (case names): a fresh HOME, default background mode, `first_call_ms` per case.
# 4. The GPU test binaries, each under a time limit, while the whole call stays under DEADLINE seconds.
# Everything is packed into OUT/all.tgz at the end.
set -u
B=$1 OUT=$2
RES=${RES:-$(mktemp -d)}
mkdir -p "$RES"
start=$(date +%s)
for i in 1 2 3; do
    h=$(mktemp -d)
    t0=$(date +%s%N)
    HOME=$h XDG_CACHE_HOME=$h/.cache POCL_CACHE_DIR=$h/pocl POCL_CPU_MAX_CU_COUNT=2 POCL_MAX_PTHREAD_COUNT=2 \
        taskset -c 0,1 "$B/netcl-new" --device cpu run bench/cold-snippet.rhai > "$RES/pocl-cold-$i.out" 2>&1
    rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    echo "{\"case\":\"cold_snippet\",\"run\":$i,\"exit\":$rc,\"wall_ms\":$ms}" >> "$RES/pocl-cold.jsonl"
done
oc=$(mktemp -d) nc=$(mktemp -d)
[ "${ROUNDS:-3}" -gt 0 ] && for b in old new; do
    c=$oc; [ "$b" = new ] && c=$nc
    NETCL_AUTOTUNE_CACHE=$c/autotune.json NETCL_PROGRAM_CACHE=$c/programs NETCL_AUTOTUNE=sync \
        timeout 200 "$B/netcl-$b" --device gpu bench --reps 3 --no-check ${CASES:-} > /dev/null 2>&1
done
for r in $(seq 1 "${ROUNDS:-3}"); do
    for b in old new; do
        c=$oc; [ "$b" = new ] && c=$nc
        NETCL_AUTOTUNE_CACHE=$c/autotune.json NETCL_PROGRAM_CACHE=$c/programs NETCL_AUTOTUNE=sync \
            timeout 100 "$B/netcl-$b" --device gpu bench --reps 20 --no-check ${CASES:-} 2>/dev/null \
            | sed "s/^{/{\"build\":\"$b\",\"round\":$r,/" >> "$RES/warm-rounds.jsonl"
    done
done
if [ -n "${FIRST:-}" ]; then
    h=$(mktemp -d)
    HOME=$h XDG_CACHE_HOME=$h/.cache NETCL_AUTOTUNE=background \
        timeout 120 "$B/netcl-new" --device gpu bench --reps 3 --no-check $FIRST > "$RES/first-contact.jsonl" 2>&1
fi
for t in ${TESTS:-}; do
    left=$(( ${DEADLINE:-560} - ($(date +%s) - start) ))
    [ "$left" -lt 20 ] && { echo "$t skipped" >> "$RES/tests.txt"; continue; }
    lim=$(( left < 60 ? left : 60 ))
    NETCL_TEST_DEVICE=gpu timeout "$lim" "$B/t-$t" --test-threads 8 > "$RES/test-$t.log" 2>&1
    echo "$t exit $? ($(grep -h '^test result' "$RES/test-$t.log" | tail -1))" >> "$RES/tests.txt"
done
echo "done in $(( $(date +%s) - start )) s" | tee "$RES/done.txt"
mkdir -p "$OUT"
tar czf "$OUT/all.tgz" -C "$RES" .
