#!/usr/bin/python3
"""The chart of forget-batch.csv: per round, unlinks/s and CPU per unlink of
each variant (before, after, after with /dev/fuse instead of the rings).

    bench/results/forget-batch/plot.py bench/results/forget-batch.csv bench/results/forget-batch.png
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

rows = list(csv.DictReader(open(sys.argv[1])))
variants = list(dict.fromkeys(r["variant"] for r in rows))
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
for ax, key, title in [
    (axes[0], "unlinks_per_s", "unlinks/s (4 processes, 4 x 4,000 files)"),
    (axes[1], "cpu_us_per_unlink", "machine CPU per unlink (µs)"),
]:
    for i, v in enumerate(variants):
        ys = [float(r[key]) for r in rows if r["variant"] == v]
        ax.scatter([i] * len(ys), ys, label=v)
        ys.sort()
        ax.hlines(ys[len(ys) // 2] if len(ys) % 2 else sum(ys[len(ys) // 2 - 1:len(ys) // 2 + 1]) / 2,
                  i - 0.3, i + 0.3, color="black")
    ax.set_xticks(range(len(variants)), variants)
    ax.set_title(title)
    ax.set_ylim(bottom=0)
fig.suptitle("Forgets batched on the classic /dev/fuse loop (rounds; line: median)")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=100)
