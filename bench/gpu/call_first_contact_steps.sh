#!/usr/bin/env bash
# GPU call 4 of 2026-12-06 (later): the first contact of every `netcl bench` case from empty caches (background
# mode, helpers on) with $BIN/netcl-new, then the four training steps of netcl-new against netcl-old on one cache
# seeded from $SEED, settled in background mode, and alternating rounds. Stops each part at its deadline.
set -u
echo libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
BIN=${BIN:-.device-bin}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee $OUT/gpu.txt
h=$(mktemp -d)
HOME=$h XDG_CACHE_HOME=$h/.cache NETCL_AUTOTUNE=background timeout ${FIRST_S:-280} $BIN/netcl-new --device gpu bench --reps 3 --no-check > $OUT/first-contact.jsonl 2> $OUT/first-contact.err
echo "first contact exit $? at $(el)"
python3 bench/gpu/first_contact.py $OUT/first-contact.jsonl
A="resnet18_train_224 mobilenet_v2_train_224 resnet18_train_112 mobilenet_v2_train_112"
c=$(mktemp -d); mkdir -p $c/.cache/netcl; cp ${SEED:-$BIN/seed-autotune.json} $c/.cache/netcl/autotune.json 2>/dev/null || true
run() { HOME=$c XDG_CACHE_HOME=$c/.cache "$@"; }
for b in new old; do for i in 1 2 3; do
  run env NETCL_AUTOTUNE=background NETCL_AUTOTUNE_BUDGET_MS=600000 timeout 90 $BIN/netcl-$b --device gpu bench --reps 5 --no-check $A > /tmp/s.jsonl 2>/dev/null
  n=$(python3 bench/gpu/unsettled.py /tmp/s.jsonl); echo "$b settle $i unsettled $n at $(el)"
  [ "$n" = 0 ] && break; [ $(el) -gt ${SETTLE_S:-470} ] && break
done; done
for r in 1 2; do for b in old new; do
  [ $(el) -gt ${END_S:-560} ] && break
  run env NETCL_AUTOTUNE=background timeout 30 $BIN/netcl-$b --device gpu bench --reps 10 --no-check $A 2>/dev/null | sed "s/^{/{\"build\":\"$b\",\"round\":$r,/" >> $OUT/steps-rounds.jsonl
done; done
python3 - $OUT/steps-rounds.jsonl <<'P'
import json,sys
for l in open(sys.argv[1]):
    d=json.loads(l)
    if 'case' in d: print(d['build'], d['round'], d['case'], d['ms'], d['median_ms'])
P
echo "done at $(el)"
