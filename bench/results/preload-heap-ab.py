"""The preload library's heap A/B: reads preload-heap-ab/{kept,reopen}/{a,b,n}N.csv
(one `shoal bench smallfile --runs 1` each: a = the library on glibc's malloc,
b = on its own mimalloc heap, n = the native client; the first of the three
rotating round by round), prints a Markdown table of medians per form and
draws preload-heap-ab.png.

    /usr/bin/python3 bench/results/preload-heap-ab.py ROUNDS
"""
import collections, csv, statistics, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

rounds = int(sys.argv[1])
here = "bench/results"
shown = ["create", "readdir+stat", "write", "read", "readdir+stat-2", "unlink"]
forms = {"kept": "files kept open", "reopen": "open+close per phase"}
fmt = lambda v: f"{v:,.0f}"
ratios = {}
for form, title in forms.items():
    rates = collections.defaultdict(list)
    for side in "abn":
        for r in range(1, rounds + 1):
            for row in csv.DictReader(open(f"{here}/preload-heap-ab/{form}/{side}{r}.csv")):
                if row["median_ops_per_s"]:  # the open+close form has no close rate
                    rates[(side, row["phase"])].append(float(row["median_ops_per_s"]))
    print(f"\n### {title}\n")
    print("| phase | glibc malloc | own heap | native | own heap / glibc | glibc / native | own heap / native |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for p in shown:
        a, b, n = (statistics.median(rates[(s, p)]) for s in "abn")
        ratios[(form, p)] = (b / a, a / n, b / n)
        print(f"| {p} | {fmt(a)} | {fmt(b)} | {fmt(n)} | {b / a:.2f}x | {a / n:.2f}x | {b / n:.2f}x |")

fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
for ax, (form, title) in zip(axes, forms.items()):
    xs = range(len(shown))
    ax.bar([x - 0.2 for x in xs], [ratios[(form, p)][1] for p in shown], 0.4, label="glibc malloc / native")
    ax.bar([x + 0.2 for x in xs], [ratios[(form, p)][2] for p in shown], 0.4, label="own heap / native")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(0.9, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(shown, rotation=20)
    ax.set_title(title)
axes[0].set_ylabel("library / native client (ops/s)")
axes[0].legend()
fig.suptitle("libshoal_preload.so on glibc's malloc and on its own heap: 4 x 2,000 x 8 KiB smallfile, 12 rounds")
fig.tight_layout()
fig.savefig(f"{here}/preload-heap-ab.png", dpi=110)
