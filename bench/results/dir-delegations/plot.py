#!/usr/bin/env python3
"""Creates/s and CPU per create, delegations off and on (dir-delegations.csv)."""
import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

rows = list(csv.DictReader(open(sys.argv[1] if len(sys.argv) > 1 else "dir-delegations.csv")))
fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
for side, color in (("false", "tab:gray"), ("true", "tab:blue")):
    r = [x for x in rows if x["dir_delegations"] == side]
    rounds = [int(x["round"]) + (0.2 if side == "true" else -0.2) for x in r]
    a.bar(rounds, [int(x["creates_per_s"]) for x in r], 0.4, color=color, label=f"dir_delegations={side}")
    b.bar(rounds, [int(x["cpu_us_per_create"]) for x in r], 0.4, color=color)
a.set_title("creates/s (4 C loops, mount)")
b.set_title("machine CPU µs per create")
for ax in (a, b):
    ax.set_xlabel("round")
    ax.set_xticks([1, 2])
a.legend(fontsize=8)
fig.tight_layout()
fig.savefig(sys.argv[2] if len(sys.argv) > 2 else "dir-delegations.png", dpi=100)
