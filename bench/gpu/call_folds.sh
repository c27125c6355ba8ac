#!/usr/bin/env bash
# GPU call: warp-shuffle folds. The row kernels' GPU tests with $BIN/tests.tgz (stripped test binaries t-NAME),
# then the f32/f16 bandwidth pairs sync-tuned from empty caches with $BIN/netcl-new.gz and $BIN/netcl-old.gz
# (gzip'd stripped builds), then alternating rounds on the tuned caches. Stops each part at its deadline; $OUT
# collects.
source bench/gpu/prep.sh
for t in ${TESTS:-norm_fused half_reduce_norm softmax}; do gpu_test $t; done
C=${CASES:-copy_large copy_large_f16 softmax_rows_large softmax_rows_large_f16 layer_norm_large layer_norm_large_f16 rms_norm_large rms_norm_large_f16 softmax_rows_4096x1024 rms_norm}
tune_builds $C
rounds $C
python3 bench/gpu/summary.py tune $(for b in $B; do echo $OUT/tune-$b.jsonl; done)
python3 bench/gpu/summary.py rounds $OUT/rounds.jsonl
echo "done at $(el)"
