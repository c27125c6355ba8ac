# Sourced by the call scripts of bench/gpu/ on the GPU machine: registers NVIDIA's OpenCL driver, unpacks each
# build $BIN/netcl-B.gz (B in $BUILDS, gzip'd stripped builds) to /tmp/netcl-B and the stripped test binaries
# of $BIN/tests.tgz (t-NAME) to /tmp/tb, and defines the steps the calls share. $OUT collects.
set -u
echo libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
BIN=${BIN:-.device-bin}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee $OUT/gpu.txt
B=${BUILDS:-new old}
for b in $B; do gunzip -c $BIN/netcl-$b.gz > /tmp/netcl-$b && chmod +x /tmp/netcl-$b; done
mkdir -p /tmp/tb && tar xzf $BIN/tests.tgz -C /tmp/tb

# gpu_test NAME [FILTER]: runs test binary t-NAME on the GPU, its log to $OUT/test-NAME.log.
gpu_test() {
  NETCL_TEST_DEVICE=gpu CI=true timeout ${TEST_S:-150} /tmp/tb/t-$1 --test-threads 4 ${2:-} > $OUT/test-$1.log 2>&1
  echo "test $1 exit $? ($(grep -h '^test result' $OUT/test-$1.log | tail -1)) at $(el)"
}

# tune_builds CASES...: each build sync-tunes the cases from an empty cache of its own (/tmp/h-B), every
# candidate's time kept in $OUT/tune-B.jsonl.
tune_builds() {
  for b in $B; do
    mkdir -p /tmp/h-$b
    HOME=/tmp/h-$b XDG_CACHE_HOME=/tmp/h-$b/.cache NETCL_AUTOTUNE=sync timeout ${TUNE_S:-200} /tmp/netcl-$b \
      --device gpu bench --reps 10 --no-check "$@" > $OUT/tune-$b.jsonl 2> /tmp/tune-$b.err
    echo "tune $b exit $? at $(el)"
  done
}

# rounds CASES...: three rounds alternating the builds on their tuned caches, 20 calls a case, until $END_S;
# every line tagged with its build and round in $OUT/rounds.jsonl.
rounds() {
  for r in 1 2 3; do for b in $B; do
    [ $(el) -gt ${END_S:-500} ] && break
    HOME=/tmp/h-$b XDG_CACHE_HOME=/tmp/h-$b/.cache NETCL_AUTOTUNE=sync timeout 60 /tmp/netcl-$b --device gpu \
      bench --reps 20 --no-check "$@" 2>/dev/null | sed "s/^{/{\"build\":\"$b\",\"round\":$r,/" >> $OUT/rounds.jsonl
  done; done
}
