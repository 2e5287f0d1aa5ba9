#!/bin/bash
# MiB/s and the machine's CPU per MiB of a cold 4-reader read (4 x 512 MiB,
# dd bs=1M after drop_caches), Shoal (4 servers, defaults) and JuiceFS, same run.
set -euo pipefail
B=/work/main/target/release/shoal
P=/work/shared/peers
W=/tmp/readcpu
rounds=${1:-2}
$B down --data $W/data >/dev/null 2>&1 || true
rm -rf $W; mkdir -p $W
$B up --servers 4 --data $W/data --mount $W/mnt --detach >/dev/null
J=$($P/juicefs/start.sh | tail -1)
trap '$B down --data $W/data >/dev/null 2>&1 || true; $P/juicefs/stop.sh >/dev/null 2>&1 || true' EXIT
declare -A M=([shoal]=$W/mnt [juicefs]=$J)
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat; }
for r in $(seq 1 $rounds); do
  for t in shoal juicefs; do
    d=${M[$t]}
    rm -f $d/f*; for i in 1 2 3 4; do dd if=/dev/zero of=$d/f$i bs=1M count=512 conv=fsync status=none & done; wait
    sync; echo 3 > /proc/sys/vm/drop_caches
    read b0 i0 < <(busy); t0=$(date +%s.%N)
    for i in 1 2 3 4; do dd if=$d/f$i of=/dev/null bs=1M status=none & done; wait
    t1=$(date +%s.%N); read b1 i1 < <(busy)
    python3 -c "
secs=$t1-$t0; busy=($b1-$b0)/100; idle=($i1-$i0)/100
print('round $r $t: %d MiB/s, %.0f us CPU per MiB, cores busy %.2f' % (2048/secs, busy*1e6/2048, busy/secs))"
  done
done
