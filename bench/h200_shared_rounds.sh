#!/usr/bin/env bash
# Steady state of two builds with one shared autotune cache, over two calls on the GPU machine, as recorded in
# bench/results/README.md:
#   bench/h200_shared_rounds.sh tune   BIN_DIR OUT_DIR   # netcl-old, then netcl-new, tune CASES in sync mode
#   bench/h200_shared_rounds.sh rounds BIN_DIR OUT_DIR   # ROUNDS alternating rounds of --reps 10, caches warm
# The cache lives in CACHE (default .device-cache/, kept between calls while the machine stays warm). A winner's
# key holds the checksum of its kernels' sources, so a family whose kernels did not change between the builds is
# tuned once and both builds time the same winner; a changed family is tuned again by the new build.
set -u
PHASE=$1 B=$2 OUT=$3
CACHE=${CACHE:-.device-cache}
mkdir -p "$CACHE" "$OUT"
export NETCL_AUTOTUNE_CACHE=$PWD/$CACHE/autotune.json NETCL_AUTOTUNE=sync
case $PHASE in
tune)
    for b in old new; do
        start=$(date +%s)
        NETCL_PROGRAM_CACHE=$PWD/$CACHE/programs-$b timeout "${TUNE_LIMIT:-230}" "$B/netcl-$b" --device gpu bench \
            --reps 2 --no-check ${CASES:-} > "$OUT/tune-$b.jsonl" 2> "$OUT/tune-$b.err"
        echo "tune $b: exit $?, $(( $(date +%s) - start )) s, $(grep -c '"case"' "$OUT/tune-$b.jsonl") cases" | tee -a "$OUT/log.txt"
    done
    ;;
rounds)
    for r in $(seq 1 "${ROUNDS:-3}"); do
        for b in old new; do
            start=$(date +%s)
            NETCL_PROGRAM_CACHE=$PWD/$CACHE/programs-$b timeout "${ROUND_LIMIT:-100}" "$B/netcl-$b" --device gpu bench \
                --reps 10 --no-check ${CASES:-} 2>/dev/null \
                | sed "s/^{/{\"build\":\"$b\",\"round\":$r,/" >> "$OUT/rounds.jsonl"
            echo "round $r $b: $(( $(date +%s) - start )) s" | tee -a "$OUT/log.txt"
        done
    done
    ;;
esac
