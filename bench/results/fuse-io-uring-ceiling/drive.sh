#!/bin/bash
# drive.sh FS THREADING ROUND_FROM ROUND_TO [N]  -> appends to creates.csv
# ABBA: odd rounds classic first, even rounds io_uring first.
# Before each turn wait (max 90 s) until the machine is >=90% idle over 2 s.
D=/work/scratch/uring
FS=$1; THR=$2; R0=$3; R1=$4; N=${5:-5000}
CSV=$D/creates.csv
[ -f $CSV ] || echo "fs,n_per_proc,round,order,mode,threading,wall_s,agg_creates_per_s,sum_proc_rates,proc_rates,ctxt_per_create,cpu_us_per_create,ctxt_delta,cpu_ticks_delta,files_created,uring_fds,cqe_delta,ring_thr_ticks,worker_thr_ticks,main_thr_ticks,threads,idle_pct_before,idle_pct_gate,gate_wait_s" > $CSV
idle2() {
  read -r _ a b c i0 w0 d e f _ < <(grep '^cpu ' /proc/stat); t0=$((a+b+c+i0+w0+d+e+f))
  sleep 2
  read -r _ a b c i1 w1 d e f _ < <(grep '^cpu ' /proc/stat); t1=$((a+b+c+i1+w1+d+e+f))
  echo $(( 100 * (i1 - i0 + w1 - w0) / (t1 - t0 + 1) ))
}
for r in $(seq $R0 $R1); do
  if [ $((r % 2)) = 1 ]; then order="classic uring"; else order="uring classic"; fi
  k=1
  for m in $order; do
    st=$(date +%s); idle=$(idle2)
    while [ $idle -lt 90 ] && [ $(( $(date +%s) - st )) -lt 90 ]; do idle=$(idle2); done
    waited=$(( $(date +%s) - st ))
    line=$(timeout 110 $D/turn.sh $r $k $m $THR $FS $N)
    rc=$?
    echo "$line,$idle,$waited" | tee -a $CSV
    [ $rc = 0 ] || echo "turn r$r $m rc=$rc" >&2
    k=$((k+1))
  done
done
