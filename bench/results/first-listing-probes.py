"""Per-round preload/native ratios of smallfile's first listing, from the
"Every round" lists of the interfaces reports named on the command line;
prints their medians and draws first-listing-probes.png.
usage: /usr/bin/python3 bench/results/first-listing-probes.py"""
import re, statistics as st, os
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

here = os.path.dirname(os.path.abspath(__file__))
RUNS = [
    ("old measure, 45 rounds, kept open", "first-listing-probes/old-measure-45-rounds-kept.md"),
    ("old measure, 45 rounds, open+close", "first-listing-probes/old-measure-45-rounds-reopen.md"),
    ("first start to last end, 30 rounds, kept open", "interfaces-smallfile.md"),
    ("first start to last end, 30 rounds, open+close", "interfaces-smallfile-reopen.md"),
]

def row(text, key):
    m = re.search(r"- " + re.escape(key) + r": (.*)", text)
    return [float(x) for x in m.group(1).split(", ")]

fig, ax = plt.subplots(figsize=(9, 4.5))
for i, (label, path) in enumerate(RUNS):
    t = open(os.path.join(here, path)).read()
    r = [p / n for p, n in zip(row(t, "preload, readdir+stat"), row(t, "native, readdir+stat"))]
    print(f"{label}: {len(r)} rounds, median {st.median(r):.2f}, range {min(r):.2f}-{max(r):.2f}")
    ax.scatter([i] * len(r), r, alpha=0.4, s=14)
    ax.plot([i - 0.25, i + 0.25], [st.median(r)] * 2, color="black")
ax.axhline(0.9, color="red", linestyle="--", label="target 0.9x")
ax.set_xticks(range(len(RUNS)))
ax.set_xticklabels([l.replace(", ", "\n") for l, _ in RUNS], fontsize=8)
ax.set_ylabel("preload / native, per round")
ax.set_title("smallfile first listing (readdir+stat), 4 x 2,000 files: per-round ratios and medians")
ax.legend()
fig.tight_layout()
fig.savefig(os.path.join(here, "first-listing-probes.png"), dpi=100)
