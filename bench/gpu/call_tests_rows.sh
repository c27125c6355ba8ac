#!/usr/bin/env bash
# GPU call 1 of 2026-12-06 (later): GPU tests, f16 rows and the BatchNorm cases with a PTX scan; on an H200 first
# the first contact of every case. $BIN holds netcl-new and tests.tgz (stripped test binaries t-NAME); $OUT collects.
set -u
echo libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); echo "$GPU" | tee $OUT/gpu.txt
B=${BIN:-.device-bin}/netcl-new
mkdir -p /tmp/tb && tar xzf ${BIN:-.device-bin}/tests.tgz -C /tmp/tb
if echo "$GPU" | grep -q H200; then
  h=$(mktemp -d)
  HOME=$h XDG_CACHE_HOME=$h/.cache NETCL_AUTOTUNE=background timeout 320 $B --device gpu bench --reps 3 --no-check > $OUT/h200-first-contact.jsonl 2> $OUT/h200-first-contact.err
  echo "first contact exit $? at $(el)"
fi
for t in norm optim softmax half_reduce_norm conv; do
  f=""; [ $t = conv ] && f="im2col bias_grad"
  left=$(( 560 - $(el) )); [ $left -lt 30 ] && { echo "$t skipped" | tee -a $OUT/tests.txt; continue; }
  lim=$(( left < 100 ? left : 100 ))
  NETCL_TEST_DEVICE=gpu timeout $lim /tmp/tb/t-$t --test-threads 8 $f > $OUT/test-$t.log 2>&1
  echo "$t exit $? ($(grep -h '^test result' $OUT/test-$t.log | tail -1)) at $(el)" | tee -a $OUT/tests.txt
done
left=$(( 570 - $(el) ))
if [ $left -gt 40 ]; then
HF=$(mktemp -d)
F="softmax_rows_large softmax_rows_large_f16 layer_norm_large layer_norm_large_f16 rms_norm_large rms_norm_large_f16 batch_norm_train_nchw batch_norm_train_nchw_bwd"
HOME=$HF XDG_CACHE_HOME=$HF/.cache NETCL_AUTOTUNE=sync timeout $(( left - 10 )) $B --device gpu bench --reps 20 --no-check $F > $OUT/f16.jsonl 2>$OUT/f16.err
echo "f16 exit $? at $(el)"
python3 bench/gpu/ptxscan.py $HF/.cache/netcl/programs /tmp/ptx 'sm_row_reg|bn_back'
grep -v "depot=0" /tmp/ptx/report.txt | head
for f in /tmp/ptx/*.ptx; do echo "$(basename $f) st16=$(grep -a -c 'st.global.u16' $f) stv=$(grep -a -c 'st.global.v' $f)"; done | head -20
python3 - $OUT/f16.jsonl <<'P'
import json,sys
for l in open(sys.argv[1]):
    try: d=json.loads(l)
    except: continue
    if 'case' in d: print(d['case'], d['ms'], d['median_ms'], d.get('gbps') or d.get('gb_s'), [x.get('winner_label') for x in d.get('decisions') or []][:2])
P
fi
echo "done at $(el)"
