import csv, statistics, collections, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rates = collections.defaultdict(list)
for side in ["before", "after"]:
    for r in (1, 2, 3):
        for row in csv.DictReader(open(f"bench/results/restructure-ab/{side}-{r}.csv")):
            rates[(side, row["config"], row["phase"])].append(float(row["median_ops_per_s"]))
phases = ["create", "readdir+stat", "write", "read", "unlink"]
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
for ax, cfg in zip(axes, ["baseline", "+colocate"]):
    xs = range(len(phases))
    for i, side in enumerate(["before", "after"]):
        meds = [statistics.median(rates[(side, cfg, p)]) for p in phases]
        lo = [m - min(rates[(side, cfg, p)]) for m, p in zip(meds, phases)]
        hi = [max(rates[(side, cfg, p)]) - m for m, p in zip(meds, phases)]
        ax.bar([x + (i - 0.5) * 0.38 for x in xs], meds, 0.38, yerr=[lo, hi], capsize=3,
               label={"before": "before (97950e2)", "after": "after (5bc8ef7)"}[side])
    ax.set_xticks(list(xs)); ax.set_xticklabels(phases)
    ax.set_yscale("log"); ax.set_ylabel("ops/s (median of 3 rounds, bars: range)")
    ax.set_title({"baseline": "baseline (every switch off)", "+colocate": "all on (defaults)"}[cfg])
    ax.legend(fontsize=8)
fig.suptitle("shoal bench ablation, before and after this session's restructuring, alternating rounds, 2026-11-23")
fig.tight_layout()
fig.savefig(sys.argv[1], dpi=110)
