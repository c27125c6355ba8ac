#!/usr/bin/env bash
# GPU calls for first contact: the first call of every `netcl bench` case from empty caches (a fresh HOME: no
# autotune cache, no program binaries, no driver cache; background mode, helpers on) with $BIN/netcl-new.gz, then
# the steady state of background against sync mode (call_steady_state.sh), until END_S seconds from the start.
# Run it again on the same warm machine to resume the steady state where it stopped; the first contact runs once.
BUILDS=new source bench/gpu/prep.sh
S=.device-cache; mkdir -p $S
if [ ! -e $S/first-done ]; then
  h=$(mktemp -d)
  HOME=$h XDG_CACHE_HOME=$h/.cache NETCL_AUTOTUNE=background timeout ${FIRST_S:-200} /tmp/netcl-new --device gpu \
    bench --reps 3 --no-check > $S/first-contact.jsonl 2> $S/first-contact.err
  echo "first contact exit $? at $(el)"
  touch $S/first-done
fi
cp $S/first-contact.jsonl $S/first-contact.err $OUT/
python3 bench/gpu/first_contact.py $OUT/first-contact.jsonl
DEADLINE=$(( ${END_S:-580} - $(el) )) bash bench/gpu/call_steady_state.sh
