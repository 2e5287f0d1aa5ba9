#!/usr/bin/python3
"""Charts for Shoal's benchmark results (run by `shoal bench ...`, or by hand).

    bench/plot.py ablation bench/results/ablation.csv bench/results/ablation.png
    bench/plot.py no_metafile bench/results/no_metafile.csv bench/results/no_metafile.png
    bench/plot.py interfaces bench/results/interfaces-WORKLOAD.csv bench/results/interfaces-WORKLOAD.png
    bench/plot.py peers bench/results/peers.csv bench/results/peers.png
    bench/plot.py leases NAME.csv NAME.png   (leases on and off, an A/B of settings)
    bench/plot.py ab NAME.csv NAME.png   (bench/run-ab)
    bench/plot.py pfa bench/results/pfa.csv bench/results/pfa.png
    bench/plot.py writesize bench/results/writesize.csv bench/results/writesize.png
    bench/plot.py streaming bench/results/streaming-peers.csv bench/results/streaming-peers.png

The interfaces charts (`shoal bench interfaces ...`): per metric, one bar per
target (preload library, FUSE mount, native client, bindfs passthrough), one
panel per unit, log scale.

The ablation chart has the form of [Carns 2009]'s Figures 3 and 4: per phase, the
rate of each configuration (each adding one technique), and each one's
factor over the baseline.

The no_metafile chart has the form of [Kuhn 2008]'s Figures 1 to 4, one row per
protocol: for create, list and remove, each client's time with and without
the hint, for every client count on disk and on tmpfs; then the time with the
hint as a percentage of the time without it.
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


def interfaces(csv_path, png_path,
               title="preload library, FUSE mount, native client, FUSE passthrough"):
    rows = list(csv.DictReader(open(csv_path)))
    targets = list(dict.fromkeys(r["target"] for r in rows))
    units = list(dict.fromkeys(r["unit"] for r in rows))
    workload = rows[0]["workload"] if rows else "?"
    fig, axes = plt.subplots(len(units), 1, figsize=(11, 4 * len(units)), squeeze=False)
    for ax, unit in zip(axes[:, 0], units):
        metrics = list(dict.fromkeys(r["metric"] for r in rows if r["unit"] == unit))
        value = {(r["target"], r["metric"]): float(r["median"]) for r in rows if r["unit"] == unit}
        width = 0.8 / len(targets)
        for i, t in enumerate(targets):
            xs = [m + i * width for m in range(len(metrics))]
            ys = [value.get((t, m), float("nan")) for m in metrics]
            ax.bar(xs, [y if y == y and y > 0 else 0 for y in ys], width, label=t)
        ax.set_xticks([m + 0.4 - width / 2 for m in range(len(metrics))])
        ax.set_xticklabels(metrics, fontsize=8, rotation=20)
        ax.set_yscale("log")
        lower = unit in ("s", "us/op")
        ax.set_ylabel(unit + (" (lower is better)" if lower else " (higher is better)"))
        ax.grid(axis="y", alpha=0.3)
        ax.legend(ncol=len(targets), fontsize=8)
    axes[0, 0].set_title(f"{workload}: {title}")
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


def label(ax, groups, ylabel, title):
    """Names a no_metafile panel's groups, axis and title."""
    ax.set_xticks(list(range(len(groups))))
    ax.set_xticklabels(groups, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)


def no_metafile(csv_path, png_path):
    rows = list(csv.DictReader(open(csv_path)))
    protocols = list(dict.fromkeys(r["protocol"] for r in rows))
    ops = ["create", "list", "remove"]
    # [Kuhn 2008]'s groups: (storage, clients), disk first as in its figures.
    groups = sorted(
        dict.fromkeys((r["storage"], int(r["clients"])) for r in rows),
        key=lambda g: (g[0] != "disk", g[0], g[1]),
    )
    labels = [f"{s}\n{c} client{'s' if c > 1 else ''}" for s, c in groups]
    row = {(r["protocol"], r["operation"], r["storage"], int(r["clients"])): r for r in rows}
    fig, axes = plt.subplots(
        len(protocols), 4, figsize=(16, 3.8 * len(protocols)), squeeze=False
    )
    xs = range(len(groups))
    for p, protocol in enumerate(protocols):
        for o, op in enumerate(ops):
            ax = axes[p][o]
            found = [row.get((protocol, op) + g) for g in groups]
            without = [float(r["without_hint_s"]) if r else 0 for r in found]
            with_hint = [float(r["with_hint_s"]) if r else 0 for r in found]
            ax.bar([x - 0.2 for x in xs], without, 0.4, label="without hint")
            ax.bar([x + 0.2 for x in xs], with_hint, 0.4, label="no_metafile")
            label(ax, labels, "seconds (slowest client)", f"{protocol}: {op}")
        ax = axes[p][3]
        width = 0.8 / len(ops)
        for o, op in enumerate(ops):
            pct = []
            for g in groups:
                r = row.get((protocol, op) + g)
                pct.append(float(r["with_pct_of_without"]) if r else 0)
            ax.bar([x + (o - 1) * width for x in xs], pct, width, label=op)
        ax.axhline(100, color="black", linewidth=0.8)
        title = f"{protocol}: efficiency ([Kuhn 2008], Fig. 4)"
        label(ax, labels, "time with hint, % of without", title)
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)


def pfa(csv_path, png_path):
    """`shoal bench pfa`: bandwidth and files per pattern, checkpoint bytes."""
    rows = list(csv.DictReader(open(csv_path)))
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    panels = [
        ("MiB/s", "MiB/s (higher is better)", "write and read bandwidth"),
        ("files", "files created (lower is better)", "files created"),
        ("MiB", "MiB written (lower is better)", "checkpoint: bytes stored"),
    ]
    for ax, (unit, ylabel, title) in zip(axes, panels):
        mine = [r for r in rows if r["unit"] == unit]
        targets = list(dict.fromkeys(r["target"] for r in mine))
        metrics = list(dict.fromkeys(r["metric"] for r in mine))
        value = {(r["target"], r["metric"]): float(r["median"]) for r in mine}
        width = 0.8 / max(len(targets), 1)
        for i, t in enumerate(targets):
            xs = [m + i * width for m in range(len(metrics))]
            ax.bar(xs, [value.get((t, m), 0) for m in metrics], width, label=t)
        ax.set_xticks([m + 0.4 - width / 2 for m in range(len(metrics))])
        ax.set_xticklabels(metrics, fontsize=8, rotation=15)
        ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("[Kato 2011]: N-N, naive N-1 with record locks, PFA")
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)


def writesize(csv_path, png_path):
    """`shoal bench writesize`: MiB/s per write size, a line per data path;
    the mixed trace (size 0 in the CSV) as bars."""
    rows = list(csv.DictReader(open(csv_path)))
    experiments = list(dict.fromkeys(r["experiment"] for r in rows))
    fig, axes = plt.subplots(1, len(experiments), figsize=(5.5 * len(experiments), 4.5))
    for ax, e in zip(axes if len(experiments) > 1 else [axes], experiments):
        mine = [r for r in rows if r["experiment"] == e]
        paths = list(dict.fromkeys(r["path"] for r in mine))
        if all(int(r["size"]) == 0 for r in mine):
            value = {r["path"]: float(r["median_mib_s"]) for r in mine}
            ax.bar(paths, [value[p] for p in paths], color=[f"C{i}" for i in range(len(paths))])
            ax.set_ylabel("MiB/s (higher is better)")
            ax.set_title({"mixed": "mixed trace", "postmark": "Postmark on the mount"}.get(e, e))
            ax.grid(axis="y", alpha=0.3)
            continue
        for path in paths:
            pts = sorted((int(r["size"]), float(r["median_mib_s"])) for r in mine if r["path"] == path)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=path)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("write size (bytes)")
        ax.set_ylabel("MiB/s (higher is better)")
        ax.set_title(e)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("[Hildebrand 2006]: direct path, gathering path and the write threshold")
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)


def peers(csv_path, png_path):
    """`bench/run-peers`: the interfaces chart's form, one bar per file system."""
    interfaces(csv_path, png_path,
               "Shoal, MooseFS and a FUSE passthrough over tmpfs (bindfs), through FUSE")


def leases(csv_path, png_path):
    """Leases on and off through the mount (an A/B of two settings)."""
    interfaces(csv_path, png_path, "Shoal's mount with leases and with lease_ms = 0, same run")


def ab(csv_path, png_path):
    """`bench/run-ab`: two builds or settings of Shoal through the mount."""
    sides = list(dict.fromkeys(r["target"] for r in csv.DictReader(open(csv_path))))
    interfaces(csv_path, png_path, f"Shoal through the mount: {' and '.join(sides)}, same run")


def streaming(csv_path, png_path):
    """`bench/run-streaming`: per phase, each target's median MiB/s, and
    every round's as dots."""
    import statistics
    rows = list(csv.DictReader(open(csv_path)))
    targets = list(dict.fromkeys(r["target"] for r in rows))
    cols = [("one_writer_mib_s", "1 writer"), ("four_writers_mib_s", "4 writers"),
            ("four_readers_mib_s", "4 readers"), ("four_readers_again_mib_s", "4 readers again")]
    cols = [(c, n) for c, n in cols if c in rows[0]]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(targets)
    for i, t in enumerate(targets):
        xs = [j + (i - (len(targets) - 1) / 2) * width for j in range(len(cols))]
        per = [[float(r[c]) for r in rows if r["target"] == t] for c, _ in cols]
        ax.bar(xs, [statistics.median(v) for v in per], width, label=t)
        for x, v in zip(xs, per):
            ax.plot([x] * len(v), v, "k.", markersize=3)
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels([n for _, n in cols])
    ax.set_ylabel("MiB/s (fsync included)")
    ax.set_title("Streaming through FUSE, same run (bars: medians, dots: rounds)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


CHARTS = {
    "ab": ab,
    "leases": leases,
    "ablation": ablation,
    "no_metafile": no_metafile,
    "interfaces": interfaces,
    "peers": peers,
    "pfa": pfa,
    "streaming": streaming,
    "writesize": writesize,
}

if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in CHARTS:
        sys.exit(__doc__)
    CHARTS[sys.argv[1]](sys.argv[2], sys.argv[3])
