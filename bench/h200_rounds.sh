#!/usr/bin/env bash
# First contact and steady state on one GPU, as recorded in bench/results/README.md:
#   bench/h200_rounds.sh NEW_BINARY OLD_BINARY OUT_DIR
# CASES (space-separated case names; default every case) and ROUNDS (default 2) may be set in the environment.
# 1. First contact: NEW with every cache empty (a fresh HOME: no autotune cache, no program binaries, no driver
#    compute cache) in the default background mode; `first_call_ms` of each case is what a first reader waits.
# 2. Steady state: OLD and NEW alternating, each with its own autotune cache in sync mode. Round 1 starts from
#    empty caches (its first calls tune; the timed repetitions come after), round 2 is warm.
set -u
NEW=$1 OLD=$2 OUT=$3
mkdir -p "$OUT"
fresh=$(mktemp -d)
HOME=$fresh XDG_CACHE_HOME=$fresh/.cache NETCL_AUTOTUNE=background \
    timeout 200 "$NEW" --device gpu bench --reps 3 --no-check ${CASES:-} > "$OUT/first-contact.jsonl" 2> "$OUT/first-contact.err"
echo "first contact: exit $?" >&2
old_cache=$(mktemp -d) new_cache=$(mktemp -d)
for round in $(seq 1 "${ROUNDS:-2}"); do
    for build in old new; do
        bin=$OLD cache=$old_cache
        [ "$build" = new ] && bin=$NEW cache=$new_cache
        start=$(date +%s)
        NETCL_AUTOTUNE_CACHE=$cache/autotune.json NETCL_PROGRAM_CACHE=$cache/programs NETCL_AUTOTUNE=sync \
            timeout 240 "$bin" --device gpu bench --reps 10 --no-check ${CASES:-} 2>/dev/null \
            | sed "s/^{/{\"build\":\"$build\",\"round\":$round,/" >> "$OUT/rounds.jsonl"
        echo "round $round $build: $(( $(date +%s) - start )) s" >&2
    done
done
