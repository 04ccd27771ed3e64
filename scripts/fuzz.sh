#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/*_target.cpp) with clang under
# ASan + UBSan and runs each for a bounded time, starting from the seed corpus
# in tests/fuzz/corpus (real segments of every kind, and every reproducer that
# once failed).
#
# Usage: scripts/fuzz.sh [--seconds N] [--build-dir DIR] [--jobs N] [--build-only | --run-only] [TARGET...]
#   --seconds N    fuzzing time per target (default 300; the test command uses 20)
#   --build-dir D  build directory (default build/fuzz)
#   --jobs N       parallel compile jobs, and targets fuzzed at the same time (default 2)
#   --build-only   configure and build, run nothing (the test command builds
#                  the targets beside another lane's tests, then runs them)
#   --run-only     run targets built before, without configuring or building
#   TARGET         segment_open, consumer_read, shmctl_render (default: all)
#
# A crash, a sanitizer report, a leak or an input that runs longer than 10 s
# fails the target: libFuzzer writes the input to DIR/artifacts/<target>-*
# and this script prints its path and the report. To keep it as a regression
# test (the g++ lanes replay tests/fuzz/corpus), fix the bug and copy the file
# into tests/fuzz/corpus with a name that says what it found.
# New inputs found during a run go to DIR/corpus/<target> (kept between runs).
#
# Prints "fuzz: <target> PASS|FAIL ..." per target; exits 0 when all passed.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
seconds=300
dir=$repo/build/fuzz
jobs=${LIBSHM_JOBS:-2}
phases=build,run
targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --build-dir) dir=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --build-only) phases=build; shift ;;
    --run-only) phases=run; shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[[ "$seconds" =~ ^[0-9]+$ ]] && ((seconds > 0)) || { echo "fuzz.sh: --seconds must be a positive integer" >&2; exit 2; }
if ((${#targets[@]} == 0)); then
  for src in "$repo"/tests/fuzz/*_target.cpp; do
    t=$(basename "$src" _target.cpp)
    targets+=("$t")
  done
fi

# clang 19 (Debian 12 package clang-19): clang 14 cannot compile std::expected
# from libstdc++ 12. scripts/setup.sh installs it.
cxx=$(command -v clang++-19 || true)
[[ -n "$cxx" ]] || { echo "fuzz.sh: clang++-19 not found (run scripts/setup.sh)" >&2; exit 1; }

if [[ $phases == *build* ]]; then
  if ! cmake -S "$repo" -B "$dir" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" \
    -DLIBSHM_BUILD_TESTS=OFF -DLIBSHM_BUILD_EXAMPLES=OFF -DLIBSHM_BUILD_TOOLS=ON \
    -DLIBSHM_BUILD_BENCH=OFF -DLIBSHM_BUILD_FUZZ=ON -DLIBSHM_SANITIZE=address,undefined \
    -DCMAKE_UNITY_BUILD=ON >/dev/null; then
    echo "fuzz.sh: configure failed" >&2
    exit 1
  fi
  build_targets=()
  for t in "${targets[@]}"; do build_targets+=("fuzz_$t"); done
  cmake --build "$dir" --parallel "$jobs" --target "${build_targets[@]}" || { echo "fuzz.sh: build failed" >&2; exit 1; }
fi
[[ $phases == *run* ]] || exit 0

export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
# Reports name functions and lines when an llvm-symbolizer is installed (the
# llvm-19 package, or another version's); without one they show addresses.
symbolizer=$(command -v llvm-symbolizer-19 || command -v llvm-symbolizer || true)
[[ -n "$symbolizer" ]] && export ASAN_SYMBOLIZER_PATH=$symbolizer UBSAN_SYMBOLIZER_PATH=$symbolizer
mkdir -p "$dir/artifacts"

# Fuzzes target $1 and writes its verdict ("fuzz: T PASS|FAIL ..." and the
# report's lines) to $dir/fuzz_$1.verdict; exit 0 when it passed.
fuzz_one() {
  local t=$1 bin=$dir/fuzz/fuzz_$1 work=$dir/corpus/$1 log=$dir/fuzz_$1.log
  local verdict=$dir/fuzz_$1.verdict rc runs before after
  mkdir -p "$work"
  before=$(ls "$dir/artifacts" | grep -c "^$t-")
  # -timeout: one input may take 10 s at most (a hang is a failure);
  # timeout(1): the whole run, with a margin for start-up and merging.
  # -rss_limit_mb=0: no RSS watcher thread. The targets lock mutexes whose
  # lock word the input writes; a word naming another live thread of the
  # process that maps the segment names a possible holder, which a lock
  # waits for (docs/architecture.md), and the watcher's thread id is the
  # fuzzer's own plus one, a mutation away. With one thread, every forged
  # owner is provably not a holder and is refused within about a second.
  timeout --kill-after=10 $((seconds + 120)) "$bin" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=0 -print_final_stats=1 -artifact_prefix="$dir/artifacts/$t-" \
    "$work" "$repo/tests/fuzz/corpus" >"$log" 2>&1
  rc=$?
  runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -n 1)
  after=$(ls "$dir/artifacts" | grep -c "^$t-")
  if ((rc == 0 && after == before)); then
    echo "fuzz: $t PASS (${runs:-?} inputs in ${seconds}s)" >"$verdict"
    return 0
  fi
  {
    echo "fuzz: $t FAIL (exit $rc after ${runs:-?} inputs; log $log)"
    grep -E "ERROR|SUMMARY|runtime error|Test unit written|==[0-9]+==" "$log" | head -20 | sed 's/^/    /'
    ls -t "$dir/artifacts" | grep "^$t-" | head -n 3 | sed "s|^|    reproducer: $dir/artifacts/|"
  } >"$verdict"
  return 1
}

# $jobs targets at a time: each libFuzzer run is one process on one core.
running=0
for t in "${targets[@]}"; do
  rm -f "$dir/fuzz_$t.verdict"
  if ((running >= jobs)); then
    wait -n
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  running=$((running + 1))
done
wait
status=0
for t in "${targets[@]}"; do
  if [[ -f "$dir/fuzz_$t.verdict" ]]; then
    cat "$dir/fuzz_$t.verdict"
    grep -q "^fuzz: $t PASS" "$dir/fuzz_$t.verdict" || status=1
  else
    echo "fuzz: $t FAIL (no verdict: the run was interrupted)"
    status=1
  fi
done
exit $status
