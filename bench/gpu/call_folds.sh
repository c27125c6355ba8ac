#!/usr/bin/env bash
# GPU call: warp-shuffle folds. The row kernels' GPU tests with $BIN/tests.tgz (stripped test binaries t-NAME),
# then the f32/f16 bandwidth pairs sync-tuned from empty caches with $BIN/netcl-new.gz and $BIN/netcl-old.gz
# (gzip'd stripped builds), then alternating rounds on the tuned caches. Stops each part at its deadline; $OUT
# collects.
set -u
echo libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
BIN=${BIN:-.device-bin}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee $OUT/gpu.txt
B=${BUILDS:-new old}
for b in $B; do gunzip -c $BIN/netcl-$b.gz > /tmp/netcl-$b && chmod +x /tmp/netcl-$b; done
mkdir -p /tmp/tb && tar xzf $BIN/tests.tgz -C /tmp/tb
for t in ${TESTS:-norm_fused half_reduce_norm softmax}; do
  NETCL_TEST_DEVICE=gpu CI=true timeout ${TEST_S:-120} /tmp/tb/t-$t --test-threads 4 > $OUT/test-$t.log 2>&1
  echo "test $t exit $? ($(grep -h '^test result' $OUT/test-$t.log | tail -1)) at $(el)"
done
C=${CASES:-copy_large copy_large_f16 softmax_rows_large softmax_rows_large_f16 layer_norm_large layer_norm_large_f16 rms_norm_large rms_norm_large_f16 softmax_rows_4096x1024 rms_norm}
for b in $B; do
  mkdir -p /tmp/h-$b
  HOME=/tmp/h-$b XDG_CACHE_HOME=/tmp/h-$b/.cache NETCL_AUTOTUNE=sync timeout ${TUNE_S:-150} /tmp/netcl-$b --device gpu \
    bench --reps 10 --no-check $C > $OUT/tune-$b.jsonl 2> /tmp/tune-$b.err
  echo "tune $b exit $? at $(el)"
done
for r in 1 2 3; do for b in $B; do
  [ $(el) -gt ${END_S:-500} ] && break
  HOME=/tmp/h-$b XDG_CACHE_HOME=/tmp/h-$b/.cache NETCL_AUTOTUNE=sync timeout 60 /tmp/netcl-$b --device gpu bench \
    --reps 20 --no-check $C 2>/dev/null | sed "s/^{/{\"build\":\"$b\",\"round\":$r,/" >> $OUT/rounds.jsonl
done; done
python3 - $OUT/rounds.jsonl $(for b in $B; do echo $OUT/tune-$b.jsonl; done) <<'P'
import json, sys, statistics as st
rows = {}
for l in open(sys.argv[1]):
    try: d = json.loads(l)
    except Exception: continue
    if 'case' in d: rows.setdefault((d['case'], d['build']), []).append(d['median_ms'])
for f in sys.argv[2:]:
    for l in open(f):
        try: d = json.loads(l)
        except Exception: continue
        if 'case' in d: print(f.split('/')[-1], d['case'], [x.get('winner_label') for x in d.get('decisions') or []])
for (c, b), v in sorted(rows.items()):
    print(c, b, 'median of round medians', round(st.median(v), 4), v)
P
echo "done at $(el)"
