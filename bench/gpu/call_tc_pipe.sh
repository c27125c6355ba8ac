#!/usr/bin/env bash
# GPU call: the tensor-core GEMM's GPU tests, then the tensor-core products sync-tuned from empty caches with
# each build $BIN/netcl-B.gz (gzip'd stripped builds, B in $BUILDS), every candidate's time kept, then
# alternating rounds on the tuned caches and PyTorch's cuBLAS in the same call. $BIN/tests.tgz holds the stripped test
# binaries t-NAME. Stops each part at its deadline; $OUT collects.
set -u
echo libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
BIN=${BIN:-.device-bin}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee $OUT/gpu.txt
B=${BUILDS:-new old}
for b in $B; do gunzip -c $BIN/netcl-$b.gz > /tmp/netcl-$b && chmod +x /tmp/netcl-$b; done
mkdir -p /tmp/tb && tar xzf $BIN/tests.tgz -C /tmp/tb
for t in ${TESTS:-gemm_tc lib}; do
  f=""; [ $t = lib ] && f=gemm_tc
  NETCL_TEST_DEVICE=gpu CI=true timeout ${TEST_S:-150} /tmp/tb/t-$t --test-threads 4 $f > $OUT/test-$t.log 2>&1
  echo "test $t exit $? ($(grep -h '^test result' $OUT/test-$t.log | tail -1)) at $(el)"
done
C=${CASES:-matmul_4096_tf32 matmul_4096_fp16 matmul_2048_tf32}
for b in $B; do
  mkdir -p /tmp/h-$b
  HOME=/tmp/h-$b XDG_CACHE_HOME=/tmp/h-$b/.cache NETCL_AUTOTUNE=sync timeout ${TUNE_S:-200} /tmp/netcl-$b --device gpu \
    bench --reps 10 --no-check $C > $OUT/tune-$b.jsonl 2> /tmp/tune-$b.err
  echo "tune $b exit $? at $(el)"
done
python3 - $(for b in $B; do echo $OUT/tune-$b.jsonl; done) <<'P'
import json, sys
for f in sys.argv[1:]:
    for l in open(f):
        try: d = json.loads(l)
        except Exception: continue
        if 'case' not in d: continue
        print(f.split('/')[-1], d['case'], 'min', d['ms'], 'median', d['median_ms'], 'first', d.get('first_call_ms'))
        for dec in d.get('decisions') or []:
            c = sorted((x for x in dec.get('candidates') or [] if x.get('ms')), key=lambda x: x['ms'])
            print('   ', dec.get('kernel'), [(x['label'], round(x['ms'], 4)) for x in c[:6]])
P
for r in 1 2 3; do for b in $B; do
  [ $(el) -gt ${END_S:-540} ] && break
  HOME=/tmp/h-$b XDG_CACHE_HOME=/tmp/h-$b/.cache NETCL_AUTOTUNE=sync timeout 60 /tmp/netcl-$b --device gpu bench \
    --reps 20 --no-check $C 2>/dev/null | sed "s/^{/{\"build\":\"$b\",\"round\":$r,/" >> $OUT/rounds.jsonl
done; done
[ $(el) -lt ${END_S:-540} ] && python3 bench/peer_matmul_tc.py cuda --reps 20 --cases ${PEER:-matmul_4096_tf32,matmul_4096_fp16,matmul_2048_tf32} > $OUT/torch.jsonl 2>&1
python3 - $OUT/rounds.jsonl $OUT/torch.jsonl <<'P'
import json, sys
for f in sys.argv[1:]:
    for l in open(f):
        try: d = json.loads(l)
        except Exception: continue
        if 'case' in d: print(d.get('build', d.get('impl')), d.get('round', ''), d['case'], d['ms'], d['median_ms'])
P
echo "done at $(el)"
