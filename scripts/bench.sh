#!/usr/bin/env bash
# The benchmarks: installs what is missing (scripts/setup.sh), builds a Release
# tree with the benchmarks only, then runs
#
#   1. shm_bench       Google Benchmark micro-benchmarks (bench/micro_*.cpp),
#                      pinned to one CPU with taskset, median/mean/stddev over
#                      repetitions
#   2. xproc_*         every cross-process harness (bench/xproc_*.cpp), each
#                      pinning itself and its peer to two CPUs, baselines
#                      interleaved with the contender run by run
#                      (xproc_bridge also runs the shm-bridge daemon, built
#                      with it, and its own nats-server)
#
# and prints their tables (Markdown; progress lines go to stderr).
#
# Usage: scripts/bench.sh [--quick] [--micro-only | --xproc-only] [--only NAME]...
#                         [--filter REGEX] [--out FILE] [--no-build]
#                         [--plot] [--plot-dir DIR] [-- XPROC_ARGS...]
#   --quick        short runs (micro: 3 x 0.05 s; xproc: --quick, about 20 s each)
#   --only NAME    run only this xproc harness (file stem, e.g. xproc_ring); repeatable
#   --filter REGEX run only the micro-benchmarks matching REGEX (e.g. SpscRing|Baseline)
#   --out FILE     also write everything printed on stdout to FILE
#   --no-build     use the existing build tree as is
#   --plot         also draw PNG charts of xproc_ring (a 64 B round-trip latency
#                  CDF per transport; throughput against message size, 8 B to
#                  64 KiB) with scripts/plot_bench.py (matplotlib): xproc_ring
#                  runs with --csv and those sizes, the charts go to --plot-dir
#   --plot-dir DIR where the charts and the CSV go (default: bench/charts)
#   XPROC_ARGS     passed to every xproc harness (e.g. -- --reps 11 --cpus 2,3)
#
# Environment:
#   LIBSHM_BENCH_BUILD  build directory (default: build-bench in the repository)
#   LIBSHM_JOBS         parallel build jobs (default 2)
#   LIBSHM_BENCH_CPU    CPU for the micro-benchmarks (default: the first allowed)
#
# Timing numbers are only as good as the machine is quiet: the load average is
# printed before each part; compare it with the number of CPUs.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build=${LIBSHM_BENCH_BUILD:-$repo/build-bench}
jobs=${LIBSHM_JOBS:-2}
quick=0
run_micro=1
run_xproc=1
do_build=1
out=""
filter=""
only=()
xproc_args=()
plot=0
plot_dir=$repo/bench/charts
plot_sizes=8,64,512,4096,32768,65536

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    --quick) quick=1; shift ;;
    --micro-only) run_xproc=0; shift ;;
    --xproc-only) run_micro=0; shift ;;
    --only) only+=("$2"); shift 2 ;;
    --filter) filter=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --plot) plot=1; shift ;;
    --plot-dir) plot_dir=$2; shift 2 ;;
    --) shift; xproc_args=("$@"); break ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

if [[ -n "$out" ]]; then
  : >"$out"
  exec > >(tee -a "$out")
fi

section() { printf '\n==== %s\n' "$*" >&2; }

# The harnesses to run: one per bench/xproc_*.cpp.
harnesses=()
for src in "$repo"/bench/xproc_*.cpp; do
  [[ -e "$src" ]] || continue
  stem=$(basename "$src" .cpp)
  if ((${#only[@]})); then
    keep=0
    for o in "${only[@]}"; do [[ "$o" == "$stem" ]] && keep=1; done
    ((keep)) || continue
  fi
  harnesses+=("$stem")
done
if ((plot)); then
  [[ " ${harnesses[*]} " == *" xproc_ring "* ]] && ((run_xproc)) || {
    echo "bench.sh: --plot draws xproc_ring's results: do not leave xproc_ring out" >&2
    exit 2
  }
  mkdir -p "$plot_dir"
fi

if ((do_build)); then
  bash "$here/setup.sh" --bench >&2
  section "build (Release, benchmarks only) in $build"
  generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  # Tools on: xproc_bridge needs the shm-bridge target (only the targets
  # below are built).
  cmake -S "$repo" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DLIBSHM_BUILD_TESTS=OFF -DLIBSHM_BUILD_BENCH=ON -DLIBSHM_BUILD_EXAMPLES=OFF \
    -DLIBSHM_BUILD_TOOLS=ON -DLIBSHM_SANITIZE= >&2
  targets=()
  ((run_micro)) && targets+=(shm_bench)
  ((run_xproc)) && targets+=("${harnesses[@]}")
  if ((${#targets[@]})); then
    cmake --build "$build" --parallel "$jobs" --target "${targets[@]}" >&2
  fi
fi
bin="$build/bin"

cpus=$(nproc)
model=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //' || true)
echo "# libshm benchmarks"
echo
echo "- $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $cpus CPU(s), ${model:-unknown CPU}, $(uname -sr)"
echo "- command: scripts/bench.sh $([[ $quick == 1 ]] && echo --quick)"

status=0
if ((run_micro)); then
  [[ -x "$bin/shm_bench" ]] || { echo "bench.sh: $bin/shm_bench was not built" >&2; exit 1; }
  micro_cpu=${LIBSHM_BENCH_CPU:-$(taskset -pc $$ 2>/dev/null | sed 's/.*: //; s/[,-].*//' || echo 0)}
  pin=()
  if command -v taskset >/dev/null 2>&1; then pin=(taskset -c "$micro_cpu"); fi
  if ((quick)); then
    micro_args=(--benchmark_repetitions=3 --benchmark_min_time=0.05)
  else
    micro_args=(--benchmark_repetitions=5 --benchmark_min_time=0.5)
  fi
  [[ -n "$filter" ]] && micro_args+=("--benchmark_filter=$filter")
  echo
  echo "## Micro-benchmarks (shm_bench, one process, CPU $micro_cpu)"
  echo
  echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- command: ${pin[*]} shm_bench ${micro_args[*]} --benchmark_report_aggregates_only=true"
  echo
  echo '```'
  "${pin[@]}" "$bin/shm_bench" "${micro_args[@]}" --benchmark_report_aggregates_only=true \
    --benchmark_counters_tabular=true 2>&1 || status=1
  echo '```'
fi

if ((run_xproc)); then
  for h in "${harnesses[@]}"; do
    [[ -x "$bin/$h" ]] || { echo "bench.sh: $bin/$h was not built" >&2; exit 1; }
    section "$h"
    args=()
    ((quick)) && args+=(--quick)
    if ((plot)) && [[ "$h" == xproc_ring ]]; then
      args+=(--csv "$plot_dir/xproc_ring.csv" --sizes "$plot_sizes")
    fi
    echo
    "$bin/$h" "${args[@]}" "${xproc_args[@]}" || status=1
  done
fi
if ((plot)); then
  section "charts"
  /usr/bin/python3 "$here/plot_bench.py" "$plot_dir/xproc_ring.csv" "$plot_dir" >&2 || status=1
fi
exit $status
