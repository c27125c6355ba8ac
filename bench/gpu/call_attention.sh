#!/usr/bin/env bash
# GPU call: attention against PyTorch. The attention GPU tests with $BIN/tests.tgz, the attention cases ($CASES) sync-tuned
# from empty caches with every build of $BUILDS (every candidate's time kept in $OUT/tune-B.jsonl), PyTorch's
# scaled_dot_product_attention in the same call (bench/peer_attention.py, FP32, TF32 off), then alternating
# rounds on the tuned caches. Stops each part at its deadline; $OUT collects.
source bench/gpu/prep.sh
for t in ${TESTS:-attention_block attention}; do gpu_test $t; done
C=${CASES:-attention_fwd attention_fwd_causal attention_fwd_bwd attention_fwd_bwd_causal}
tune_builds $C
timeout 120 python3 bench/peer_attention.py > $OUT/torch.jsonl 2> $OUT/torch.err
echo "torch exit $? at $(el)"
rounds $C
python3 bench/gpu/summary.py tune $(for b in $B; do echo $OUT/tune-$b.jsonl; done)
python3 bench/gpu/summary.py rounds $OUT/rounds.jsonl $OUT/torch.jsonl
# Local stack frames and spills in every program the first build compiled (bench/gpu/ptxscan.py).
python3 bench/gpu/ptxscan.py /tmp/h-${B%% *}/.cache/netcl/programs $OUT/ptx | tail -1
echo "done at $(el)"
