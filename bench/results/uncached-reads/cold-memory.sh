#!/usr/bin/env bash
# Does a cold read through Shoal pay for memory the guest freed long ago?
# One 4-server cluster of BIN; per round, twice: write 4 x 512 MiB through
# the mount, wait 10 s (memory freed meanwhile goes back to the host), drop
# the page cache, then read them back either at once ("cold") or after
# touching and freeing 5 GiB ("warm": the read then reuses memory freed an
# instant ago), and read once more after another drop ("again"). MiB/s and
# the machine's CPU ms per MiB of each read. Needs root.
#   cold-memory.sh BIN [ROUNDS]
set -euo pipefail
bin=$1; rounds=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
w=$(mktemp -d /tmp/cold-memory.XXXXXX)
gcc -O2 -o "$w/touch-memory" "$here/touch-memory.c"
mkdir -p "$w/mnt"
"$bin" up --data "$w/data" --mount "$w/mnt" --detach >/dev/null
trap '"$bin" down --data "$w/data" >/dev/null 2>&1; rm -rf "$w"' EXIT
cpu() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
readall() { # warm|cold: "MiB/s,CPU ms per MiB"
  sync; echo 3 >/proc/sys/vm/drop_caches
  if [ "$1" = warm ]; then "$w/touch-memory" 5120; fi
  local c0 c1 t0 t1
  c0=$(cpu); t0=$(date +%s.%N)
  for i in 1 2 3 4; do dd if="$w/mnt/f$i" of=/dev/null bs=1M status=none & done
  wait
  t1=$(date +%s.%N); c1=$(cpu)
  awk -v a="$t0" -v b="$t1" -v c="$c0" -v d="$c1" 'BEGIN { printf "%.0f,%.2f", 2048 / (b - a), (d - c) * 10 / 2048 }'
}
echo "round,memory,read_mib_s,read_cpu_ms_per_mib,again_mib_s,again_cpu_ms_per_mib"
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="cold warm"; else order="warm cold"; fi
  for kind in $order; do
    rm -f "$w"/mnt/f*
    for i in 1 2 3 4; do dd if=/dev/zero of="$w/mnt/f$i" bs=1M count=512 conv=fsync status=none & done
    wait
    sleep 10
    echo "$r,$kind,$(readall "$kind"),$(readall cold)"
  done
done
