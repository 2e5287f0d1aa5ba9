#!/usr/bin/python3
"""Charts for Shoal's benchmark results (run by `shoal bench ...`, or by hand).

    bench/plot.py ablation bench/results/ablation.csv bench/results/ablation.png

The ablation chart has the form of seed 000's Figures 3 and 4: per phase, the
rate of each configuration (each adding one technique), and each one's
factor over the baseline.
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PHASES = ["create", "readdir+stat", "write", "read", "unlink"]


def ablation(csv_path, png_path):
    rows = list(csv.DictReader(open(csv_path)))
    configs = list(dict.fromkeys(r["config"] for r in rows))
    rate = {(r["config"], r["phase"]): float(r["median_ops_per_s"]) for r in rows}
    # As a factor over the baseline: gains range from 1.3x to 40x, so a log axis.
    gain = {(r["config"], r["phase"]): 1 + float(r["improvement_pct"]) / 100 for r in rows}
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 8))
    width = 0.8 / len(configs)
    for i, c in enumerate(configs):
        xs = [p + i * width for p in range(len(PHASES))]
        top.bar(xs, [rate.get((c, p), 0) for p in PHASES], width, label=c)
        bottom.bar(xs, [gain.get((c, p), 0) for p in PHASES], width, label=c)
    for ax in (top, bottom):
        ax.set_xticks([p + 0.4 - width / 2 for p in range(len(PHASES))])
        ax.set_xticklabels(PHASES)
        ax.grid(axis="y", alpha=0.3)
    top.set_yscale("log")
    top.set_ylabel("operations/s (log)")
    top.set_title("Small-file rates through the mount, one technique added at a time")
    top.legend(ncol=3, fontsize=8)
    bottom.set_yscale("log")
    bottom.set_ylabel("x baseline (log)")
    bottom.axhline(1, color="black", linewidth=0.8)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "ablation":
        sys.exit(__doc__)
    ablation(sys.argv[2], sys.argv[3])
