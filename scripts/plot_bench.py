#!/usr/bin/python3
"""Draws the ring benchmark charts from an xproc_ring --csv file.

usage: scripts/plot_bench.py CSV OUTDIR

Writes into OUTDIR:
  ring_rtt_cdf_64B.png          round-trip latency CDF per transport at 64 B
                                (each quantile: the median over rounds)
  ring_throughput_by_size.png   one-way messages per second against message
                                size per transport (median over rounds)

scripts/bench.sh --plot runs the harness and then this script. Needs
python3-matplotlib (scripts/setup.sh --bench installs it).
"""
import csv
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

RTT_TITLE = re.compile(r"^Ping-pong RTT, 64 B \(")
THROUGHPUT_TITLE = re.compile(r"^Throughput, (\d+) B messages")


def load(path):
    """{(comparison, case, metric): [value per round]} (ratios left out)."""
    values = defaultdict(list)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row["case"].startswith("ratio: "):
                continue
            values[(row["comparison"], row["case"], row["metric"])].append(float(row["value"]))
    return values


def colours(values):
    """One colour per transport, the same in both charts."""
    cases = sorted({case for (_, case, _) in values})
    palette = plt.get_cmap("tab10").colors
    return {case: palette[i % len(palette)] for i, case in enumerate(cases)}


def size_label(n):
    return f"{n // 1024} KiB" if n >= 1024 and n % 1024 == 0 else f"{n} B"


def save(fig, ax, legend_at, path):
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc=legend_at, fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_rtt_cdf(values, colour, out):
    curves = defaultdict(list)  # case -> [(ns, q)]
    for (comparison, case, metric), rounds in values.items():
        if RTT_TITLE.match(comparison) and metric.startswith("cdf_"):
            curves[case].append((statistics.median(rounds), float(metric[4:])))
    if not curves:
        raise SystemExit("plot_bench: no 64 B RTT distribution in the CSV (run xproc_ring "
                         "with --only rtt or without --only, and --rtt-size 64)")
    fig, ax = plt.subplots(figsize=(8, 5))
    for case in sorted(curves, key=lambda c: statistics.median(ns for ns, _ in curves[c])):
        points = sorted(curves[case], key=lambda p: p[1])
        ax.plot([ns for ns, _ in points], [q for _, q in points], label=case, linewidth=1.5,
                color=colour[case])
    ax.set_xscale("log")
    ax.set_xlabel("round trip (ns, log scale)")
    ax.set_ylabel("fraction of round trips at or below")
    ax.set_title("Ping-pong round trip, 64 B, two processes on two CPUs")
    save(fig, ax, "lower right", out / "ring_rtt_cdf_64B.png")


def plot_throughput(values, colour, out):
    series = defaultdict(dict)  # case -> {size: msg/s}
    for (comparison, case, metric), rounds in values.items():
        m = THROUGHPUT_TITLE.match(comparison)
        if m and metric == "msg_s" and statistics.median(rounds) > 0:
            series[case][int(m.group(1))] = statistics.median(rounds)
    if not series:
        raise SystemExit("plot_bench: no throughput comparison in the CSV")
    sizes = sorted({s for points in series.values() for s in points})
    fig, ax = plt.subplots(figsize=(8, 5))
    for case in sorted(series, key=lambda c: -max(series[c].values())):
        xs = sorted(series[case])
        ax.plot(xs, [series[case][x] / 1e6 for x in xs], marker="o", label=case,
                linewidth=1.5, color=colour[case])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes, [size_label(s) for s in sizes])
    ax.set_xlabel("message size")
    ax.set_ylabel("million messages per second (log scale)")
    ax.set_title("One-way throughput, producer and consumer on two CPUs")
    save(fig, ax, "lower left", out / "ring_throughput_by_size.png")


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    values = load(argv[1])
    out = Path(argv[2])
    out.mkdir(parents=True, exist_ok=True)
    colour = colours(values)
    plot_rtt_cdf(values, colour, out)
    plot_throughput(values, colour, out)
    print(f"plot_bench: wrote {out / 'ring_rtt_cdf_64B.png'} and "
          f"{out / 'ring_throughput_by_size.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
