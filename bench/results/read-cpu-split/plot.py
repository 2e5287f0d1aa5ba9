"""Charts of read-cpu-split: CPU per MiB by process, and first reads per variant."""
import csv
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

here = sys.argv[1] if len(sys.argv) > 1 else "."

rows = list(csv.DictReader(open(f"{here}/per-process.csv")))
groups = defaultdict(list)
for r in rows:
    groups[f"{r['server_reads']}\n{r['fuse_transport']}"].append(r)
names = list(groups)
parts = [
    ("servers", "servers_cpu_ms_per_mib", 1.0),
    ("mount", "mount_cpu_ms_per_mib", 1.0),
    ("readers (dd)", "readers_sys_s", 1000 / 2048),
]
fig, axes = plt.subplots(1, 4, figsize=(21, 5))
ax = axes[0]
bottom = [0.0] * len(names)
for label, col, scale in parts:
    vals = [statistics.median(float(r[col]) * scale for r in groups[n]) for n in names]
    ax.bar(names, vals, bottom=bottom, label=label)
    bottom = [b + v for b, v in zip(bottom, vals)]
ax.set_ylabel("CPU ms per MiB read (median of runs)")
ax.set_title("Cold read, 4 x 512 MiB: CPU by process")
ax.tick_params(axis="x", labelsize=7)
ax.legend()

for ax, name in zip(axes[1:], ["variants-server-reads.csv", "variants-mount.csv", "variants-landed.csv"]):
    data = defaultdict(list)
    for r in csv.DictReader(open(f"{here}/{name}")):
        data[r["variant"]].append(float(r["four_readers_mib_s"]))
    variants = list(data)
    for i, v in enumerate(variants):
        ax.scatter([i] * len(data[v]), data[v], color="grey")
        ax.hlines(statistics.median(data[v]), i - 0.3, i + 0.3, color="C0")
    ax.set_xticks(range(len(variants)), variants, fontsize=7)
    ax.set_ylabel("first read MiB/s (rounds; line: median)")
    ax.set_title(name.removesuffix(".csv"))
fig.tight_layout()
fig.savefig(f"{here}/read-cpu-split.png", dpi=110)
