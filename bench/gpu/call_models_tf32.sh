#!/usr/bin/env bash
# GPU call 3, on the machine of call 2 (its cache in /tmp/c9cache): more rounds of the MobileNetV2 cases, then TF32
# (NETCL_PRECISION=tf32) settled and timed against PyTorch with --tf32.
echo libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
A="resnet18_infer_224 resnet18_train_224 mobilenet_v2_infer_224 mobilenet_v2_train_224 resnet18_infer_112 resnet18_train_112 mobilenet_v2_infer_112 mobilenet_v2_train_112"
I="mobilenet_v2_infer_224 mobilenet_v2_infer_112 mobilenet_v2_train_224 mobilenet_v2_train_112"
h=/tmp/c9cache; ls $h/.cache/netcl | head -3
run() { HOME=$h XDG_CACHE_HOME=$h/.cache "$@"; }
run env NETCL_AUTOTUNE=background NETCL_AUTOTUNE_BUDGET_MS=600000 timeout 100 ${BIN:-.device-bin}/netcl-new --device gpu bench --reps 5 --no-check $A > /tmp/s.jsonl 2>/dev/null
echo "new settle 4 unsettled $(python3 bench/gpu/unsettled.py /tmp/s.jsonl) at $(el)"
for r in 1 2; do for b in old new; do
  run env NETCL_AUTOTUNE=background timeout 40 ${BIN:-.device-bin}/netcl-$b --device gpu bench --reps 10 --no-check $I 2>/dev/null | sed "s/^{/{\"build\":\"$b\",\"round\":$r,/" >> $OUT/mbv2-rounds.jsonl
done; done
echo "mbv2 rounds at $(el)"
for i in 1 2 3 4; do
  run env NETCL_PRECISION=tf32 NETCL_AUTOTUNE=background NETCL_AUTOTUNE_BUDGET_MS=600000 timeout 100 ${BIN:-.device-bin}/netcl-new --device gpu bench --reps 5 --no-check $A > /tmp/t.jsonl 2>/dev/null
  n=$(python3 bench/gpu/unsettled.py /tmp/t.jsonl); echo "tf32 settle $i unsettled $n at $(el)"
  [ "$n" = 0 ] && break; [ $(el) -gt 380 ] && break
done
run env NETCL_PRECISION=tf32 NETCL_AUTOTUNE=background timeout 60 ${BIN:-.device-bin}/netcl-new --device gpu bench --reps 10 --no-check $A > $OUT/models-tf32.jsonl 2>/dev/null
timeout 90 python3 bench/peer_models.py cuda --reps 10 --tf32 > $OUT/torch-tf32.jsonl 2>/dev/null; echo "torch tf32 at $(el)"
python3 - $OUT/mbv2-rounds.jsonl $OUT/models-tf32.jsonl $OUT/torch-tf32.jsonl <<'P'
import json,sys
for f in sys.argv[1:]:
  for l in open(f):
    try: d=json.loads(l)
    except: continue
    if 'case' not in d: continue
    print(f.split('/')[-1][:12], d.get('build',''), d.get('round',''), d['case'], d['ms'], d['median_ms'])
P
