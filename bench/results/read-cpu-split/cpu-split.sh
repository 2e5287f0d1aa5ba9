#!/usr/bin/env bash
# Per-process CPU of one cold 4-reader read through a fresh Shoal mount: cpu-split.sh BIN
set -euo pipefail
bin=$1
w=$(mktemp -d /tmp/cpusplit.XXXXXX); mkdir -p $w/mnt
"$bin" up --data $w/data --mount $w/mnt --detach ${SETS:-} >/dev/null
trap '"$bin" down --data $w/data >/dev/null 2>&1; rm -rf $w' EXIT
snapall() { for p in /proc/[0-9]*; do t=$(cat $p/stat 2>/dev/null) || continue; echo "$t" | sed -E 's/^([0-9]+) \((.*)\) (.*)$/\1 \2|\3/' | awk -F'|' '{split($2,f," "); print $1"|"f[12]+f[13]}'; done; }
for i in 1 2 3 4; do dd if=/dev/zero of=$w/mnt/f$i bs=1M count=512 conv=fsync status=none & done; wait
sync; echo 3 > /proc/sys/vm/drop_caches; sleep 1
snapall > $w/s0; c0=$(awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat)
s0=$(date +%s.%N)
/usr/bin/time -f "dd total: user %U sys %S" bash -c "for i in 1 2 3 4; do dd if=$w/mnt/f\$i of=/dev/null bs=1M status=none & done; wait"
s1=$(date +%s.%N)
snapall > $w/s1; c1=$(awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat)
echo "MiB/s $(echo "2048/($s1-$s0)" | bc); machine cpu ms/MiB $(echo "scale=2; ($c1-$c0)*10/2048" | bc)"
join -t'|' <(sort $w/s0) <(sort $w/s1) | awk -F'|' '{d=$3-$2; if (d>0) {split($1,a," "); print a[1], d}}' | while read pid d; do role=$(tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null | awk '{print $2}'); echo "$(cat /proc/$pid/comm 2>/dev/null):$role $d"; done | awk '{sum[$1]+=$2} END {for (n in sum) printf "%-36s %6.2f ms/MiB\n", n, sum[n]*10/2048}' | sort -k2 -nr | head
