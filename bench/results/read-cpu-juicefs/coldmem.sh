#!/bin/bash
# Does the first read after Shoal's (direct) writes pay for memory the guest
# has not touched lately (free page reporting)? One 4-server cluster; per
# round: write 4 x 512 MiB, then read them back after drop_caches, either
# straight away ("cold") or after touching 6 GiB of memory in a throwaway
# process and freeing it ("warmed"), alternating which goes first.
set -euo pipefail
B=/work/main/target/release/shoal
W=/tmp/coldmem
rounds=${1:-3}
$B down --data $W/data >/dev/null 2>&1 || true
rm -rf $W; mkdir -p $W
$B up --servers 4 --data $W/data --mount $W/mnt --detach >/dev/null
trap '$B down --data $W/data >/dev/null 2>&1 || true' EXIT
write() { for i in 1 2 3 4; do dd if=/dev/zero of=$W/mnt/f$i bs=1M count=512 conv=fsync status=none & done; wait; }
readall() {
  sync; echo 3 > /proc/sys/vm/drop_caches
  local t0=$(date +%s.%N)
  for i in 1 2 3 4; do dd if=$W/mnt/f$i of=/dev/null bs=1M status=none & done; wait
  local t1=$(date +%s.%N)
  python3 -c "print(round(2048/($t1-$t0)))"
}
warm() { python3 -c "b=bytearray(6<<30); b[::4096]=b'x'*len(b[::4096])"; }
for r in $(seq 1 $rounds); do
  for kind in $( [ $((r % 2)) = 1 ] && echo "cold warmed" || echo "warmed cold"); do
    rm -f $W/mnt/f*; write
    [ $kind = warmed ] && warm
    echo "round $r $kind $(readall) again $(readall)"
  done
done
