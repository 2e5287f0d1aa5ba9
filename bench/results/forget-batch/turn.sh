#!/bin/bash
# turn.sh BIN LABEL: a fresh 4-server sync=replay cluster, mounted; 4 processes
# create N files each (open+close, N=4000), then unlink them; only the unlinks
# are timed. Prints: LABEL unlinks/s CPU-µs-per-unlink and the voluntary
# context switches of the mount's fuser threads. Needs ./unl (gcc -O2 -o unl unl.c).
B=$1; L=$2; N=${N:-4000}; D=${RUN_DIR:-/tmp}/forget-batch-$L
rm -rf $D; mkdir -p $D/m
$B up --servers 4 --data $D/data --mount $D/m --set sync=replay $SETS --detach >/dev/null 2>&1 || { echo up failed; exit 1; }
for p in 0 1 2 3; do ./unl $D/m/p$p $N c & done; wait
sync; sleep 1
cpu0=$(awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat); t0=$(date +%s.%N)
for p in 0 1 2 3; do ./unl $D/m/p$p $N u & done; wait
t1=$(date +%s.%N); cpu1=$(awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat)
MP=$(pgrep -f "mount.*forget-batch-$L/m" | head -1)
for t in /proc/$MP/task/*; do echo "$(cat $t/comm) $(grep '^voluntary_ctxt' $t/status | awk '{print $2}')"; done | grep fuser | tr '\n' ' ' > $D/cs
$B down --data $D/data >/dev/null 2>&1
echo "$L $(echo "4*$N/($t1-$t0)" | bc -l | xargs printf %.0f) $(echo "($cpu1-$cpu0)*10000/(4*$N)" | bc -l | xargs printf %.1f) $(cat $D/cs)"
