#!/usr/bin/env bash
# One turn of the create_files benchmark: a fresh 4-server cluster (the
# defaults: sync = "replay", colocate, stuffing) and its mount, then the
# native smallfile with the create phase made BATCH files per call (1: one
# `create` per file). Prints: batch, creates/s, machine CPU us per create.
#   bench/results/create-files/turn.sh BIN BATCH [FILES_PER_PROC]
set -euo pipefail
BIN=$1; BATCH=$2; N=${3:-5000}
W=$(mktemp -d /tmp/create-files.XXXXXX); mkdir -p "$W/mnt"
"$BIN" up --servers 4 --data "$W/data" --mount "$W/mnt" --detach >/dev/null
trap '"$BIN" down --data "$W/data" >/dev/null 2>&1; rm -rf "$W"' EXIT
"$BIN" bench smallfile --dir "$W/mnt" --native -p 4 -n "$N" --runs 1 \
  --create-batch "$BATCH" --json "$W/out.json" >/dev/null 2>&1
python3 - "$W/out.json" "$BATCH" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p = next(p for p in r["phases"] if p["phase"] == "create")
print(f"{sys.argv[2]},{p['median_ops_per_s']:.0f},{p['median_cpu_us_per_unit'] or float('nan'):.1f}")
PY
