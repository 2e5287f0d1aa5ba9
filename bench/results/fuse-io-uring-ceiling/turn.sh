#!/bin/bash
# turn.sh ROUND ORDER MODE THREADING [FS] [N]
#   MODE: classic | uring ; THREADING: default | single
#   FS: hl (example/passthrough, high-level, default) | hp (example/passthrough_hp)
# One benchmark turn: fresh passthrough_hp mount on tmpfs backing, one warm-up
# run (4 x creat 5000), rm through the mount, timed run (4 x creat 5000),
# unmount, clean backing.  Prints one CSV line on stdout; log on stderr.
set -u
ROUND=$1; ORDER=$2; MODE=$3; THR=$4
D=/work/scratch/uring
FS=${5:-hl}; N=${6:-5000}
CREAT=/work/scratch/creat
MNT=$D/mnt; BK=$D/backing
TOTAL=$((4*N))

if [ $FS = hp ]; then
  PH=$D/libfuse/build/example/passthrough_hp
  opts=(--foreground)
  [ "$THR" = single ] && opts+=(--single)
  [ "$MODE" = uring ] && opts+=(-o io_uring)
  args=("${opts[@]}" $BK $MNT)
else
  PH=$D/libfuse/build/example/passthrough
  opts=(-f -o modules=subdir,subdir=$BK)
  [ "$THR" = single ] && opts+=(-s)
  [ "$MODE" = uring ] && opts+=(-o io_uring)
  args=("${opts[@]}" $MNT)
fi

# backing must be empty, nothing mounted
mountpoint -q $MNT && { echo "mnt busy" >&2; exit 1; }
rm -rf $BK/* 2>/dev/null

$PH "${args[@]}" >$D/logs/ph-$FS-r$ROUND-$MODE-$THR.log 2>&1 &
PID=$!
for i in $(seq 50); do mountpoint -q $MNT && break; sleep 0.1; done
mountpoint -q $MNT || { echo "mount failed" >&2; kill $PID; exit 1; }
sleep 0.3   # let ring threads register

nuring=$(ls -l /proc/$PID/fd 2>/dev/null | grep -c 'io_uring')
threads=$(cat /proc/$PID/task/*/comm | sort | uniq -c | awk '{printf "%s*%s ",$2,$1}')

cqsum() { # total CQEs consumed over all io_uring fds of the daemon
  local s=0
  for fd in /proc/$PID/fd/*; do
    if [ "$(readlink $fd)" = "anon_inode:[io_uring]" ]; then
      h=$(awk '/^CqHead:/{print $2}' /proc/$PID/fdinfo/${fd##*/}); s=$((s+h))
    fi
  done; echo $s; }
thrcpu() { # ticks (utime+stime) of daemon threads whose comm matches $1
  local s=0
  for t in /proc/$PID/task/*; do
    if [[ "$(cat $t/comm)" == $1 ]]; then
      s=$((s + $(awk '{print $14+$15}' $t/stat)))
    fi
  done; echo $s; }

runset() { # 4 parallel creat, each bounded to 100 s
  local out=$1
  local pids=()
  for p in 0 1 2 3; do timeout 100 $CREAT $MNT/d$p $N > $out.$p 2>&1 & pids+=($!); done
  wait "${pids[@]}"
}

mkdir -p $D/logs/tmp; rm -f $D/logs/tmp/*
# warm-up
runset $D/logs/tmp/warm
timeout 100 rm -rf $MNT/d0 $MNT/d1 $MNT/d2 $MNT/d3
sync
read -r _ a b c i0 w0 d e f _ < <(grep '^cpu ' /proc/stat); tot0=$((a+b+c+i0+w0+d+e+f))
sleep 1
read -r _ a b c i1 w1 d e f _ < <(grep '^cpu ' /proc/stat); tot1=$((a+b+c+i1+w1+d+e+f))
idle_pre=$(( 100 * (i1 - i0 + w1 - w0) / (tot1 - tot0 + 1) ))

# timed run
read -r _ u n s _ _ irq sirq st _ < <(grep '^cpu ' /proc/stat)
c0=$((u+n+s+irq+sirq+st)); x0=$(awk '/^ctxt/{print $2}' /proc/stat)
cq0=$(cqsum); rc0=$(thrcpu 'fuse-ring*'); wc0=$(thrcpu 'fuse_worker'); mc0=$(thrcpu 'passthrough*')
t0=$(date +%s.%N)
runset $D/logs/tmp/timed
t1=$(date +%s.%N)
read -r _ u n s _ _ irq sirq st _ < <(grep '^cpu ' /proc/stat)
c1=$((u+n+s+irq+sirq+st)); x1=$(awk '/^ctxt/{print $2}' /proc/stat)
cq1=$(cqsum); rc1=$(thrcpu 'fuse-ring*'); wc1=$(thrcpu 'fuse_worker'); mc1=$(thrcpu 'passthrough*')

rates=$(cat $D/logs/tmp/timed.[0-3] | awk '{print $1}' | paste -sd' ')
sumrate=$(cat $D/logs/tmp/timed.[0-3] | awk '{s+=$1} END{print s}')
nfiles=$(find $BK -type f | wc -l)
wall=$(echo "$t1 - $t0" | bc -l)
agg=$(echo "$TOTAL / $wall" | bc -l)
ctxt_per=$(echo "($x1 - $x0) / $TOTAL" | bc -l)
cpu_us_per=$(echo "($c1 - $c0) * 10000 / $TOTAL" | bc -l)

fusermount3 -u $MNT
for i in $(seq 100); do kill -0 $PID 2>/dev/null || break; sleep 0.1; done
kill -0 $PID 2>/dev/null && { echo "daemon $PID did not exit, killing" >&2; kill $PID; sleep 0.5; }
rm -rf $BK/*

# idle_pct_1s_before_timed_run appended at end
# fs,n_per_proc,round,order,mode,threading,wall_s,agg_creates_per_s,sum_proc_rates,proc_rates,ctxt_per_create,cpu_us_per_create,ctxt_delta,cpu_ticks_delta,files_created,uring_fds,cqe_delta,ring_thr_ticks,worker_thr_ticks,main_thr_ticks,threads
printf '%s,%s,%s,%s,%s,%s,%.3f,%.0f,%s,%s,%.2f,%.1f,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' \
  $FS $N $ROUND $ORDER $MODE $THR $wall $agg $sumrate "$rates" $ctxt_per $cpu_us_per \
  $((x1-x0)) $((c1-c0)) $nfiles $nuring $((cq1-cq0)) $((rc1-rc0)) $((wc1-wc0)) $((mc1-mc0)) "$threads" $idle_pre
