#!/usr/bin/env bash
# What uncached reads cost a second client: one 4-server cluster per
# variant, mounted twice. Per round: 4 x 512 MiB written through mount A,
# page cache dropped, read back through A (cold), then at once through B
# (A's read may have left the data in the servers' page cache; B's own
# cache is empty). MiB/s of both reads.
#   second-reader.sh ROUNDS "name|bin|--set k=v ..." ...
set -euo pipefail
rounds=$1; shift
w=$(mktemp -d /tmp/second-reader.XXXXXX)
names=(); declare -A bin
for v in "$@"; do
  IFS='|' read -r n b s <<<"$v"; names+=("$n"); bin[$n]=$b
  mkdir -p "$w/$n/a" "$w/$n/b"
  # shellcheck disable=SC2086
  "$b" up --data "$w/$n/data" --mount "$w/$n/a" --detach $s >/dev/null
  "$b" mount "$w/$n/data/cluster.toml" "$w/$n/b" >/dev/null
done
cleanup() {
  for n in "${names[@]}"; do
    fusermount3 -u "$w/$n/b" 2>/dev/null || true
    "${bin[$n]}" down --data "$w/$n/data" >/dev/null 2>&1 || true
  done
  rm -rf "$w"
}
trap cleanup EXIT
rate() { # COMMAND MIB
  local t0 t1
  t0=$(date +%s.%N); eval "$1"; t1=$(date +%s.%N)
  awk -v m="$2" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", m / (b - a) }'
}
readall() { echo "for i in 1 2 3 4; do dd if=$1/f\$i of=/dev/null bs=1M status=none & done; wait"; }
echo "round,variant,first_reader_mib_s,second_reader_mib_s"
k=${#names[@]}
for r in $(seq 1 "$rounds"); do
  for j in $(seq 0 $((k - 1))); do
    n=${names[$(((j + r) % k))]}
    a=$w/$n/a; b=$w/$n/b
    rm -f "$a"/f*
    for i in 1 2 3 4; do dd if=/dev/zero of="$a/f$i" bs=1M count=512 conv=fsync status=none & done
    wait
    sync; echo 3 >/proc/sys/vm/drop_caches
    first=$(rate "$(readall "$a")" 2048)
    second=$(rate "$(readall "$b")" 2048)
    echo "$r,$n,$first,$second"
  done
done
