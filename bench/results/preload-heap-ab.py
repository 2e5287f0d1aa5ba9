"""The preload library's heap A/B: reads preload-heap-ab/{a,b,n}N.csv (one
`shoal bench smallfile --runs 1` each: a = the library on glibc's malloc,
b = on its own mimalloc heap, n = the native client; the first of the three
rotating round by round), prints the Markdown table of medians and draws
preload-heap-ab.png with the two earlier A/Bs' ratios given below.

    /usr/bin/python3 bench/results/preload-heap-ab.py ROUNDS
"""
import collections, csv, statistics, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

rounds = int(sys.argv[1])
here = "bench/results"
rates = collections.defaultdict(list)
phases = []
for side in "abn":
    for r in range(1, rounds + 1):
        for row in csv.DictReader(open(f"{here}/preload-heap-ab/{side}{r}.csv")):
            if row["phase"] not in phases:
                phases.append(row["phase"])
            rates[(side, row["phase"])].append(float(row["median_ops_per_s"]))

shown = ["create", "readdir+stat", "write", "read", "readdir+stat-2", "unlink"]
fmt = lambda v: f"{v:,.0f}"
print("| phase | glibc malloc | own heap | native | own heap / glibc | glibc / native | own heap / native |")
print("|---|---:|---:|---:|---:|---:|---:|")
third = {}
for p in shown:
    a, b, n = (statistics.median(rates[(s, p)]) for s in "abn")
    third[p] = b / a
    print(f"| {p} | {fmt(a)} | {fmt(b)} | {fmt(n)} | {b / a:.2f}x | {a / n:.2f}x | {b / n:.2f}x |")

# The two earlier A/Bs (same form, 12 rounds each; own heap / glibc malloc):
# the first with mimalloc v3, the second with v2 on a freshly started cluster.
earlier = {
    "v3, run 1": {"create": 0.96, "readdir+stat": 1.21, "write": 1.12, "read": 0.97, "readdir+stat-2": 1.26, "unlink": 1.09},
    "v2, run 2": {"create": 1.05, "readdir+stat": 1.05, "write": 3.44, "read": 0.92, "readdir+stat-2": 1.11, "unlink": 1.10},
}
runs = dict(earlier, **{"v2, run 3": third})
fig, ax = plt.subplots(figsize=(9, 4))
width = 0.8 / len(runs)
for i, (name, ratios) in enumerate(runs.items()):
    xs = [j + i * width for j in range(len(shown))]
    ax.bar(xs, [min(ratios[p], 2.0) for p in shown], width, label=name)
ax.axhline(1.0, color="black", linewidth=0.8)
ax.set_xticks([j + width for j in range(len(shown))])
ax.set_xticklabels(shown)
ax.set_ylabel("own heap / glibc malloc (ops/s)")
ax.set_title("libshoal_preload.so on its own heap: 4 x 2,000 x 8 KiB smallfile, 12 rounds each\n(bars capped at 2.0; run 2's write: 3.44x)")
ax.legend()
fig.tight_layout()
fig.savefig(f"{here}/preload-heap-ab.png", dpi=110)
