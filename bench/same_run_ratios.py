#!/usr/bin/env python3
"""Same-run ratios of shm_bench micro-benchmarks.

Google Benchmark runs each benchmark's repetitions back to back, so a
contender and its baseline are measured seconds apart, under whatever the
shared VM is doing at each moment. This runs shm_bench N times, each run
measuring every contender and its baseline once (pinned to one CPU), takes
contender/baseline inside each run, and reports the median with p10/p90 over
runs, as the cross-process harnesses do.

  bench/same_run_ratios.py --runs 11 \\
      --pair BM_Ledger_ReserveRelease:BM_Baseline_ReserveRelease \\
      --pair BM_Ledger_Admit4:BM_Baseline_Admit4
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys


def quantile(values, p):
    v = sorted(values)
    k = (len(v) - 1) * p
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=os.path.join(here, "..", "build-bench", "bin", "shm_bench"))
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--cpu", default="1", help="CPU to pin to (taskset -c)")
    ap.add_argument("--min-time", default="0.4", help="--benchmark_min_time per benchmark and run")
    ap.add_argument("--pair", action="append", required=True, metavar="CONTENDER:BASELINE")
    a = ap.parse_args()
    pairs = [p.split(":", 1) for p in a.pair]
    if any(len(p) != 2 for p in pairs):
        sys.exit("same_run_ratios: --pair takes CONTENDER:BASELINE")
    names = sorted({n for p in pairs for n in p})
    flt = "^(" + "|".join(re.escape(n) for n in names) + ")$"
    times = {n: [] for n in names}
    ratios = {tuple(p): [] for p in pairs}
    for _ in range(a.runs):
        out = subprocess.run(
            ["taskset", "-c", a.cpu, a.bench, f"--benchmark_filter={flt}",
             f"--benchmark_min_time={a.min_time}", "--benchmark_format=json"],
            capture_output=True, text=True, check=True).stdout
        got = {b["name"]: b["real_time"] for b in json.loads(out)["benchmarks"]}
        missing = [n for n in names if n not in got]
        if missing:
            sys.exit(f"same_run_ratios: not measured: {', '.join(missing)}")
        for n in names:
            times[n].append(got[n])
        for c, b in pairs:
            ratios[(c, b)].append(got[c] / got[b])
    print(f"{a.runs} runs, pinned to CPU {a.cpu}; median (p10-p90) over runs\n")
    print("| benchmark | ns/op |")
    print("|---|---:|")
    for n in names:
        t = times[n]
        print(f"| {n} | {statistics.median(t):.1f} ({quantile(t, .1):.1f}-{quantile(t, .9):.1f}) |")
    print("\n| same-run ratio | median | p10 | p90 |")
    print("|---|---:|---:|---:|")
    for (c, b), r in ratios.items():
        print(f"| {c} / {b} | {statistics.median(r):.2f} | {quantile(r, .1):.2f} | "
              f"{quantile(r, .9):.2f} |")


if __name__ == "__main__":
    main()
