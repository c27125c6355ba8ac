#!/usr/bin/env bash
# GPU call 2: the eight model cases, netcl-new against netcl-old (both in $BIN) on one autotune cache seeded from
# $SEED (a settled cache of an earlier run, optional), each settled in background mode, then two alternating rounds;
# a --profile run of two training steps; PyTorch eager FP32 (bench/peer_models.py). The cache stays in $H for call 3.
set -u
echo libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee $OUT/gpu.txt
A="resnet18_infer_224 resnet18_train_224 mobilenet_v2_infer_224 mobilenet_v2_train_224 resnet18_infer_112 resnet18_train_112 mobilenet_v2_infer_112 mobilenet_v2_train_112"
h=${H:-/tmp/c9cache}; mkdir -p $h/.cache/netcl; [ -e $h/.cache/netcl/autotune.json ] || cp ${SEED:-${BIN:-.device-bin}/seed-autotune.json} $h/.cache/netcl/autotune.json 2>/dev/null || true
run() { HOME=$h XDG_CACHE_HOME=$h/.cache "$@"; }
for b in new old; do
for i in 1 2 3 4; do
  run env NETCL_AUTOTUNE=background NETCL_AUTOTUNE_BUDGET_MS=600000 timeout 120 ${BIN:-.device-bin}/netcl-$b --device gpu bench --reps 5 --no-check $A > /tmp/s.jsonl 2>/dev/null
  n=$(python3 bench/gpu/unsettled.py /tmp/s.jsonl); echo "$b settle $i unsettled $n at $(el)"
  [ "$n" = 0 ] && break; [ $(el) -gt ${SETTLE:-260} ] && break
done
done
for r in 1 2; do for b in old new; do
  run env NETCL_AUTOTUNE=background timeout 60 ${BIN:-.device-bin}/netcl-$b --device gpu bench --reps 10 --no-check $A 2>/dev/null | sed "s/^{/{\"build\":\"$b\",\"round\":$r,/" >> $OUT/models-rounds.jsonl
  echo "round $r $b at $(el)"
done; done
run env NETCL_AUTOTUNE=background timeout 60 ${BIN:-.device-bin}/netcl-new --device gpu bench --reps 5 --no-check --profile mobilenet_v2_train_112 resnet18_train_224 > $OUT/models-profile.jsonl 2>/dev/null
timeout 100 python3 bench/peer_models.py cuda --reps 10 > $OUT/torch-fp32.jsonl 2>/dev/null; echo "torch fp32 at $(el)"
python3 - $OUT/models-rounds.jsonl $OUT/models-profile.jsonl $OUT/torch-fp32.jsonl <<'P'
import json,sys
for f in sys.argv[1:]:
  for l in open(f):
    try: d=json.loads(l)
    except: continue
    if 'case' not in d: continue
    p=d.get('profile') or {}
    print(f.split('/')[-1][:14], d.get('build',''), d.get('round',''), d['case'], d['ms'], d['median_ms'], 'launches', p.get('launches'), 'idle', p.get('idle_ms'))
P
echo "done at $(el)"
