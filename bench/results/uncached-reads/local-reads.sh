#!/usr/bin/env bash
# The kernel's side of uncached reads, without Shoal: 16 files of 128 MiB
# written with O_DIRECT (as Shoal's servers write large pieces) in DIR, then
# per round and mode (cached, uncached) 16 threads read them after dropping
# the page cache, once "cold" (10 s after the drop: on this VM memory freed
# that long ago is handed back to the host, and its next first touch costs a
# fault there) and once "warm" (the files read through the page cache just
# before the drop, so the read reuses memory freed an instant ago). Per run:
# wall and system seconds, device reads and their mean size, page cache
# growth. Needs root (drop_caches).
#   local-reads.sh DIR [ROUNDS]
set -euo pipefail
dir=$1; rounds=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
gcc -O2 -pthread -o "$dir/local-reads" "$here/local-reads.c"
dev=$(basename "$(df --output=source "$dir" | tail -1)")
stat=/sys/block/$dev/stat
mkdir -p "$dir/files"
for i in $(seq 1 16); do dd if=/dev/zero of="$dir/files/f$i" bs=1M count=128 oflag=direct status=none; done
sync
echo "round,memory,mode,wall_s,sys_s,device_reads,mean_read_kib,cache_growth_mib"
for r in $(seq 1 "$rounds"); do
  for memory in cold warm; do
    for mode in cached uncached; do
      if [ "$memory" = warm ]; then cat "$dir"/files/f* >/dev/null; fi
      echo 3 >/proc/sys/vm/drop_caches
      if [ "$memory" = cold ]; then sleep 10; fi
      c0=$(awk '/^Cached:/ {print $2}' /proc/meminfo)
      read -r -a a <"$stat"
      ws=$("$dir/local-reads" "$mode" "$dir"/files/f*)
      read -r -a b <"$stat"
      c1=$(awk '/^Cached:/ {print $2}' /proc/meminfo)
      reads=$((b[0] - a[0]))
      echo "$r,$memory,$mode,$ws,$reads,$(((b[2] - a[2]) / 2 / (reads > 0 ? reads : 1))),$(((c1 - c0) / 1024))"
    done
  done
done
