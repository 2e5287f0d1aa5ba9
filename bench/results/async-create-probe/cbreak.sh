#!/usr/bin/env bash
# CPU and context switches per create, by process and thread, for 4 C create
# loops on a fresh cluster. CREAT: ../fuse-io-uring-ceiling/creat.c, compiled
# (gcc -O2 -o creat creat.c); BIN: the shoal binary; SETS: `shoal up` flags.
#   SETS="--set sync=replay" EXP_ASYNC_CREATE=2 ./cbreak.sh   # with the probe patch
set -euo pipefail
BIN=${BIN:-/work/main/target/release/shoal}
W=/tmp/cb.$$; mkdir -p $W/mnt
$BIN up --data $W/data --mount $W/mnt --detach ${SETS:-} >/dev/null
trap '$BIN down --data $W/data >/dev/null 2>&1; rm -rf $W' EXIT
N=${N:-5000}; CREAT=${CREAT:-/work/scratch/creat}
run() { for p in 0 1 2 3; do $CREAT $W/mnt/$1$p $N & done; wait; }
run warm >/dev/null
pids=$(pgrep -f "shoal.*$W" | tr '\n' ' ')
snap() { for p in $pids; do for t in /proc/$p/task/*; do
  [ -r $t/stat ] || continue
  read -r line < $t/stat; name=${line#*(}; name=${name%%)*}; rest=${line##*) }
  set -- $rest; v=$(awk '/^voluntary_ctxt/{v=$2} /^nonvoluntary_ctxt/{n=$2} END{print v, n}' $t/status); echo "$p:${t##*/} $name ${12} ${13} $v"; done; done; }
c0=$(awk '/^ctxt/{print $2}' /proc/stat); snap > $W/s0; s0=$(awk '/^cpu /{print $2+$3+$4+$6+$7+$8}' /proc/stat)
st0=$(awk '/^cpu /{print $7+$8}' /proc/stat)
run p
snap > $W/s1; s1=$(awk '/^cpu /{print $2+$3+$4+$6+$7+$8}' /proc/stat)
st1=$(awk '/^cpu /{print $7+$8}' /proc/stat)
tot=$((4*N))
c1=$(awk '/^ctxt/{print $2}' /proc/stat); echo "ctxt/create $(( (c1-c0)*100/tot ))/100"; echo "total us/create: $(( (s1-s0)*10000 / tot ))  softirq us/create: $(( (st1-st0)*10000/tot ))"
for p in $pids; do echo "pid $p: $(tr '\0' ' ' < /proc/$p/cmdline | cut -c1-60)"; done
awk -v tot=$tot 'NR==FNR{b[$1]=$3+$4; v[$1]=$5; n[$1]=$6; next} {split($1,a,":"); k=a[1]" "$2; d[k]+=$3+$4-b[$1]; dv[k]+=$5-v[$1]; dn[k]+=$6-n[$1]} END{for(k in d) if(d[k]>0||dv[k]>0) printf "%-40s %6.1f us  vol %.2f invol %.2f per create\n", k, d[k]*10000/tot, dv[k]/tot, dn[k]/tot}' $W/s0 $W/s1 | sort -k3 -nr
