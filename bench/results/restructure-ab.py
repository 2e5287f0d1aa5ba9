"""Issue 13's before/after check: reads restructure-ab/{before,after}-N.csv
(one `shoal bench ablation --rounds 1` each, run alternating), prints the
Markdown table of medians and draws restructure-ab.png.

    /usr/bin/python3 bench/results/restructure-ab.py ROUNDS BEFORE AFTER
"""
import collections, csv, statistics, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

rounds, before, after = int(sys.argv[1]), sys.argv[2], sys.argv[3]
here = "bench/results"
rates = collections.defaultdict(list)
order = []
for side in ["before", "after"]:
    for r in range(1, rounds + 1):
        for row in csv.DictReader(open(f"{here}/restructure-ab/{side}-{r}.csv")):
            key = (row["config"], row["phase"])
            if key not in order:
                order.append(key)
            rates[(side,) + key].append(float(row["median_ops_per_s"]))

fmt = lambda v: f"{v:,.0f}"
print(f"| configuration | phase | before ({before}) | after ({after}) | after/before | rounds before | rounds after |")
print("|---|---|---:|---:|---:|---|---|")
for cfg, phase in order:
    b, a = rates[("before", cfg, phase)], rates[("after", cfg, phase)]
    mb, ma = statistics.median(b), statistics.median(a)
    print(f"| {cfg} | {phase} | {fmt(mb)} | {fmt(ma)} | {ma / mb:.2f}x | "
          f"{', '.join(map(fmt, b))} | {', '.join(map(fmt, a))} |")

phases = ["create", "readdir+stat", "write", "read", "unlink"]
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
for ax, cfg in zip(axes, ["baseline", "+colocate"]):
    xs = range(len(phases))
    for i, (side, label) in enumerate([("before", before), ("after", after)]):
        vals = [rates[(side, cfg, p)] for p in phases]
        meds = [statistics.median(v) for v in vals]
        lo = [m - min(v) for m, v in zip(meds, vals)]
        hi = [max(v) - m for m, v in zip(meds, vals)]
        ax.bar([x + (i - 0.5) * 0.38 for x in xs], meds, 0.38, yerr=[lo, hi], capsize=3,
               label=f"{side} ({label})")
    ax.set_xticks(list(xs)); ax.set_xticklabels(phases)
    ax.set_yscale("log"); ax.set_ylabel(f"ops/s (median of {rounds} rounds, bars: range)")
    ax.set_title({"baseline": "baseline (every switch off)", "+colocate": "all on (defaults)"}[cfg])
    ax.legend(fontsize=8)
fig.suptitle("shoal bench ablation before and after issue 13's restructuring, alternating rounds")
fig.tight_layout()
fig.savefig(f"{here}/restructure-ab.png", dpi=110)
