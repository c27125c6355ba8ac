#!/usr/bin/env bash
# GPU call: the tensor-core GEMM's GPU tests, then the tensor-core products sync-tuned from empty caches with
# each build $BIN/netcl-B.gz (gzip'd stripped builds, B in $BUILDS), every candidate's time kept, then
# alternating rounds on the tuned caches and PyTorch's cuBLAS in the same call. $BIN/tests.tgz holds the stripped test
# binaries t-NAME. Stops each part at its deadline; $OUT collects.
source bench/gpu/prep.sh
for t in ${TESTS:-gemm_tc lib}; do
  if [ $t = lib ]; then gpu_test lib gemm_tc; else gpu_test $t; fi
done
C=${CASES:-matmul_4096_tf32 matmul_4096_fp16 matmul_2048_tf32}
tune_builds $C
python3 bench/gpu/summary.py tune $(for b in $B; do echo $OUT/tune-$b.jsonl; done)
END_S=${END_S:-540} rounds $C
[ $(el) -lt ${END_S:-540} ] && python3 bench/peer_matmul_tc.py cuda --reps 20 --cases ${PEER:-matmul_4096_tf32,matmul_4096_fp16,matmul_2048_tf32} > $OUT/torch.jsonl 2>&1
python3 bench/gpu/summary.py rounds $OUT/rounds.jsonl $OUT/torch.jsonl
echo "done at $(el)"
