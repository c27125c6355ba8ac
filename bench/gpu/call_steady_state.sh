#!/usr/bin/env bash
# Steady state of background against sync mode on one GPU, build $BIN/netcl-new.gz: background mode from empty
# caches, settling processes until no decision is open, sync mode from an empty autotune cache sharing the
# program binaries, then three rounds alternating the two. Resumable across calls on a warm machine: the state
# lives in .device-cache (git-ignored) under the deadline DEADLINE (seconds from the start, default 540); $OUT
# gets the results. ROUNDS (default 3) alternating rounds of REPS (default 10) calls a case, each begun only
# while more than MARGIN seconds (default 100) are left.
BUILDS=new source bench/gpu/prep.sh
B=/tmp/netcl-new
DEADLINE=${DEADLINE:-540}
S=.device-cache; mkdir -p $S/res
R=$S/res
C="pw_mbv2_56 pw_mbv2_56_bwd pw_mbv2_14 pw_mbv2_14_bwd pw_resnet_28 pw_resnet_28_bwd conv3x3_56 conv3x3_56_bwd conv3x3_14 conv3x3_14_bwd dw3x3_56 dw3x3_56_bwd dw3x3_s2_112 dw3x3_s2_112_bwd matmul_1024 matmul_2048 sum_axis1_4096 sum_axis0_4096 softmax_rows_4096x1024 fused_chain_4096 batch_norm_train_nchw attention_fwd attention_fwd_bwd rms_norm embedding_bwd resnet18_infer_112 mobilenet_v2_infer_112"
HB=$PWD/$S/hb HS=$PWD/$S/hs; mkdir -p $HB $HS
PROG=$HB/.cache/netcl/programs
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
bg() { HOME=$HB XDG_CACHE_HOME=$HB/.cache NETCL_AUTOTUNE=background "$@"; }
sy() { HOME=$HS XDG_CACHE_HOME=$HS/.cache NETCL_PROGRAM_CACHE=$PROG NETCL_AUTOTUNE=sync "$@"; }
if [ ! -s $R/bg-first.jsonl ]; then
  bg timeout 150 $B --device gpu bench --reps 3 --no-check $C > $R/bg-first.jsonl 2> $R/bg-first.err
  echo "bg-first exit $? left $(left) unsettled $(python3 bench/gpu/unsettled.py $R/bg-first.jsonl)" | tee -a $R/log
fi
i=$(ls $R | grep -c '^bg-settle-.*jsonl$')
while [ ! -e $R/settled ] && [ $(left) -gt 120 ] && [ $i -lt 6 ]; do
  i=$((i+1))
  bg env NETCL_AUTOTUNE_BUDGET_MS=600000 timeout 110 $B --device gpu bench --reps 20 --no-check $C > $R/bg-settle-$i.jsonl 2> $R/bg-settle-$i.err
  rc=$?; n=$(python3 bench/gpu/unsettled.py $R/bg-settle-$i.jsonl)
  echo "bg-settle-$i exit $rc left $(left) unsettled $n" | tee -a $R/log
  [ $rc = 0 ] && [ "$n" = 0 ] && touch $R/settled
done
if [ -e $R/settled ] && [ ! -e $R/sync-done ] && [ $(left) -gt 100 ]; then
  t=$(( $(left) - 20 )); [ $t -gt 240 ] && t=240
  sy timeout $t $B --device gpu bench --reps 3 --no-check $C >> $R/sync-cold.jsonl 2>> $R/sync-cold.err
  rc=$?; echo "sync-cold exit $rc left $(left)" | tee -a $R/log
  [ $rc = 0 ] && touch $R/sync-done
fi
r=$(ls $R | grep -c '^bg-warm-.*jsonl$')
while [ -e $R/sync-done ] && [ $r -lt ${ROUNDS:-3} ] && [ $(left) -gt ${MARGIN:-100} ]; do
  r=$((r+1))
  bg timeout 60 $B --device gpu bench --reps ${REPS:-10} --no-check $C > $R/bg-warm-$r.jsonl 2>> $R/warm.err
  a=$?
  sy timeout 60 $B --device gpu bench --reps ${REPS:-10} --no-check $C > $R/sync-warm-$r.jsonl 2>> $R/warm.err
  echo "round $r exit $a $? left $(left)" | tee -a $R/log
done
tar czf $OUT/ss.tgz -C $R . && tar czf $OUT/ss-tune.tgz -C $S --exclude programs --exclude ComputeCache --exclude res hb hs 2>/dev/null
