#!/bin/bash
# One-off check (issue 15): Shoal's first read of four 512 MiB files, right after a turn of
# another target (Shoal itself, MooseFS, JuiceFS, bindfs), all peers mounted. Run from the
# checkout, as root, after `cargo build --release -p shoal-cli`; results in first-read-after-peers.md.
set -eu
bin=${SHOAL_BIN:-target/release/shoal}
P=${PEERS_DIR:-../shared/peers}
w=$(mktemp -d /tmp/afterpeers.XXXX); mkdir -p $w/mnt
$bin up --data $w/data --mount $w/mnt --detach >/dev/null
M=$($P/moosefs/start.sh 2>/dev/null | tail -1); J=$(JFS_FORMAT_OPTS="--trash-days 0" $P/juicefs/start.sh 2>/dev/null | tail -1); B=$($P/bindfs/start.sh 2>/dev/null | tail -1)
trap "$bin down --data $w/data >/dev/null 2>&1; for p in moosefs juicefs bindfs; do $P/\$p/stop.sh >/dev/null 2>&1; done; rm -rf $w" EXIT
now() { date +%s.%N; }
dc() { sync; echo 3 > /proc/sys/vm/drop_caches; }
turn() { d=$1/t$$; mkdir -p $d; dc
  dd if=/dev/zero of=$d/one bs=1M count=1024 conv=fsync status=none; rm -f $d/one; dc
  for p in 0 1 2 3; do dd if=/dev/zero of=$d/s$p bs=1M count=512 conv=fsync status=none & done; wait; dc
  t0=$(now); for p in 0 1 2 3; do dd if=$d/s$p of=/dev/null bs=1M status=none & done; wait; t1=$(now)
  rm -rf $d; awk -v a=$t0 -v b=$t1 'BEGIN{printf "%.0f", 2048/(b-a)}'; }
turn $w/mnt >/dev/null
for r in 1 2 3; do
  for pre in shoal moosefs juicefs bindfs; do
    case $pre in shoal) d=$w/mnt;; moosefs) d=$M;; juicefs) d=$J;; bindfs) d=$B;; esac
    x=$(turn $d); s=$(turn $w/mnt)
    echo "round $r after $pre ($x): shoal first read $s"
  done
done
