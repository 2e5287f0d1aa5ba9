"""Chart of bench/results/create-files.csv: creates/s and machine CPU per
create by batch size (median of the rounds, with their range)."""
import csv
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

src, out = sys.argv[1], sys.argv[2]
rate, cpu = defaultdict(list), defaultdict(list)
for row in csv.DictReader(open(src)):
    b = int(row["batch"])
    rate[b].append(float(row["creates_per_s"]))
    cpu[b].append(float(row["cpu_us_per_create"]))
batches = sorted(rate)
labels = [str(b) for b in batches]
fig, (a, c) = plt.subplots(1, 2, figsize=(10, 4))
for ax, data, title in ((a, rate, "creates/s"), (c, cpu, "machine CPU, µs per create")):
    med = [statistics.median(data[b]) for b in batches]
    lo = [m - min(data[b]) for m, b in zip(med, batches)]
    hi = [max(data[b]) - m for m, b in zip(med, batches)]
    ax.bar(labels, med, yerr=[lo, hi], capsize=4, color="#4878a8")
    ax.set_title(title)
    ax.set_xlabel("files per create_files call (1: one create each)")
fig.suptitle("Native client, 4 processes x 5,000 files, 4 servers, sync = replay (median, range of 3 rounds)")
fig.tight_layout()
fig.savefig(out, dpi=100)
