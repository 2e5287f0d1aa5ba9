#!/usr/bin/env bash
# 4 C create loops on a fresh release cluster; optional perf.
# CREAT: ../fuse-io-uring-ceiling/creat.c, compiled (gcc -O2 -o creat creat.c).
set -euo pipefail
BIN=${BIN:-/work/main/target/release/shoal}
W=/tmp/cp.$$; mkdir -p $W/mnt
$BIN up --data $W/data --mount $W/mnt --detach ${SETS:-} >/dev/null
trap '$BIN down --data $W/data >/dev/null 2>&1; rm -rf $W' EXIT
N=${N:-5000}
CREAT=${CREAT:-/work/scratch/creat}
run() { for p in 0 1 2 3; do $CREAT $W/mnt/$1$p $N & done; wait; }
run warm >/dev/null
s0=$(awk '/^cpu /{print $2+$3+$4+$6+$7+$8}' /proc/stat); c0=$(awk '/^ctxt/{print $2}' /proc/stat)
if [ -n "${PERF:-}" ]; then perf record -a -g -o /work/scratch/cperf.data -- bash -c "$(declare -f run); W=$W N=$N; run p" ; else run p; fi
s1=$(awk '/^cpu /{print $2+$3+$4+$6+$7+$8}' /proc/stat); c1=$(awk '/^ctxt/{print $2}' /proc/stat); echo "ctxt per create: $(( (c1-c0)/(4*N) ))"
echo "cpu ticks: $((s1-s0))  per create us: $(( (s1-s0)*10000*1000/(4*N) / 1000 ))"
