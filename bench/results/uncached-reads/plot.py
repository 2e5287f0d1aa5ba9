"""Charts of uncached-reads: the kernel alone, Shoal's variants, the streaming
run with the build before and the peers, and a second client's read."""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

here = sys.argv[1] if len(sys.argv) > 1 else "."


def per_round(name, key, value):
    """{series: [value of each round]} of a csv, in file order."""
    out = defaultdict(list)
    for r in csv.DictReader(open(f"{here}/{name}")):
        out[key(r)].append(float(r[value]))
    return out


fig, axes = plt.subplots(1, 4, figsize=(22, 5))
ax = axes[0]
local = per_round("local-reads.csv", lambda r: f"{r['memory']}, {r['mode']}", "wall_s")
ax.bar(list(local), [sorted(v)[len(v) // 2] for v in local.values()],
       color=["tab:red", "tab:green", "tab:orange", "tab:blue"])
for i, v in enumerate(local.values()):
    ax.plot([i] * len(v), v, "k.")
ax.set_ylabel("seconds for 2 GiB (median bar, rounds as dots)")
ax.set_title("Kernel alone: 16 local readers, 1 MiB pieces")
ax.tick_params(axis="x", labelsize=8)

panels = [
    (axes[1], "variants.csv", lambda r: r["variant"], "first_read_mib_s",
     "Shoal cold read, one run: cached vs uncached"),
    (axes[2], "streaming-ab.csv", lambda r: r["target"], "four_readers_mib_s",
     "bench/run-streaming 4: first read after the writes"),
    (axes[3], "second-reader.csv", lambda r: r["variant"], "second_reader_mib_s",
     "A second mount reading the same files at once"),
]
for ax, name, key, value, title in panels:
    data = per_round(name, key, value)
    if name == "streaming-ab.csv":
        data = {k: data[k] for k in ("shoal", "shoal-before", "juicefs", "moosefs") if k in data}
    for label, vals in data.items():
        ax.plot(range(1, len(vals) + 1), vals, marker="o", label=label)
    ax.set_xlabel("round")
    ax.set_ylabel("MiB/s")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.legend()
fig.tight_layout()
fig.savefig(f"{here}/uncached-reads.png", dpi=80)
