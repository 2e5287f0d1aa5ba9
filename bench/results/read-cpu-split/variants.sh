#!/usr/bin/env bash
# Same-run rounds of cold 4-reader reads over N variants: variants.sh ROUNDS "name|bin|[ENV=v]|[--set k=v ...]" ...
set -euo pipefail
rounds=$1; shift
w=$(mktemp -d /tmp/variants.XXXXXX)
names=(); declare -A bin envs
for v in "$@"; do IFS='|' read -r n b e s <<<"$v"; names+=($n); bin[$n]=$b; envs[$n]=$e
  mkdir -p $w/$n/mnt; env $e "$b" up --data $w/$n/data --mount $w/$n/mnt --detach $s >/dev/null; done
trap 'for n in "${names[@]}"; do "${bin[$n]}" down --data $w/$n/data >/dev/null 2>&1; done; rm -rf $w' EXIT
rate() { local s0 s1; s0=$(date +%s.%N); eval "$1"; s1=$(date +%s.%N); echo "scale=0; $2/($s1-$s0)" | bc -l; }
k=${#names[@]}
for r in $(seq 1 $rounds); do
  for j in $(seq 0 $((k-1))); do
    n=${names[$(( (j + r) % k ))]}; m=$w/$n/mnt; rm -f $m/f*
    wr=$(rate "for i in 1 2 3 4; do dd if=/dev/zero of=$m/f\$i bs=1M count=512 conv=fsync status=none & done; wait" 2048)
    sync; echo 3 > /proc/sys/vm/drop_caches
    c0=$(awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat)
    rd=$(rate "for i in 1 2 3 4; do dd if=$m/f\$i of=/dev/null bs=1M status=none & done; wait" 2048)
    c1=$(awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat)
    sync; echo 3 > /proc/sys/vm/drop_caches
    rd2=$(rate "for i in 1 2 3 4; do dd if=$m/f\$i of=/dev/null bs=1M status=none & done; wait" 2048)
    echo "$r,$n,$wr,$rd,$rd2,$(echo "scale=2; ($c1-$c0)*10/2048" | bc)"
  done
done
