#!/bin/bash
# ring-ab.sh ROUNDS: creates through a fresh cluster mount, FUSE over io_uring on/off (ABBA)
BIN=${BIN:-/work/main/target/release/shoal}
for r in $(seq 1 $1); do
  if [ $((r % 2)) = 1 ]; then order="Y N"; else order="N Y"; fi
  for m in $order; do
    echo $m > /sys/module/fuse/parameters/enable_uring
    out=$(BIN=$BIN N=5000 bash "$(dirname "$0")/cprof.sh" 2>&1)
    rate=$(echo "$out" | awk '/creates\/s/{s+=$1} END{print s}')
    echo "$r,$m,$rate,$(echo "$out" | grep -o 'per create us: [0-9]*' | awk '{print $4}'),$(echo "$out" | grep -o 'ctxt per create: [0-9]*' | awk '{print $4}')"
  done
done
