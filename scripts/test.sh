#!/usr/bin/env bash
# The test command (README, CI): installs what is missing, then runs the whole
# suite in four lanes, each its own build directory, configure + build + ctest.
# The lanes are a pipeline: while one lane's tests run, the next lane builds
# beside them under nice 19 (see build_lane below), so the build takes the CPU
# the tests leave idle and never the CPU a test wants.
#
#   normal  RelWithDebInfo (-O2 -DNDEBUG), everything (tests, examples, tools, benchmarks built;
#           the programs' and benchmarks' own code at -O0: LIBSHM_PROGRAMS_AT_O0)
#           but the README/docs blocks, and the install checks
#   tsan    -DLIBSHM_SANITIZE=thread, -O1, benchmarks off, and only the tests in
#           which several threads of one process use the library
#           (LIBSHM_TESTS_THREADED_ONLY: TSan sees one process's threads, not
#           the protocol between processes; tests/CMakeLists.txt)
#   asan    -DLIBSHM_SANITIZE=address,undefined, -O1, benchmarks off, and
#           WITHOUT -DNDEBUG: the library's contract asserts are on, and the
#           tests' EXPECT_DEATH checks of them (compiled only without NDEBUG) run;
#           the README/docs blocks
#   fuzz    scripts/fuzz.sh: the libFuzzer targets (clang, ASan + UBSan), each
#           run for LIBSHM_FUZZ_SECONDS (default 20) from the seed corpus; a
#           crash, sanitizer report or hang fails the lane and leaves the
#           reproducer in build/ci-fuzz/artifacts
#
# The sanitizer lanes build the library at -O1 (the sanitizers' own
# recommendation): at -O2 their compile time doubles, and the build, not the
# tests, is what bounds this command on a 2-core machine. The code around it
# (tests, helpers, examples, tools) compiles at -O0 there, five times faster
# than at -O1 under ASan + UBSan (tests/CMakeLists.txt). For the same reason every lane is a
# unity build (CMAKE_UNITY_BUILD): the test binaries, shmctl, the sidecar and
# the benchmarks compile a few sources per translation unit, so the headers
# they share (gtest, nlohmann-json, CLI11, fmt) are parsed and their templates
# instantiated once per batch instead of once per file; the library compiles
# one unit per area (src/relay, src/spsc, ...: libshm/CMakeLists.txt): 67 s
# of CPU for the whole library at -O2 instead of 113 s.
#
# In the sanitizer lanes a ctest entry is a whole GoogleTest suite
# (LIBSHM_TESTS_BY_SUITE, tests/CMakeLists.txt): starting and stopping a
# sanitized test binary costs about 0.3 s of CPU (ASan registering the
# binary's globals, LeakSanitizer's scan at exit), more than most tests take,
# and one start per test was about 300 s of the ASan lane's 724 s of test CPU.
# Each suite writes its results to <lane>/gtest-results/, from which the
# summary counts the tests passed, failed and skipped, by name. The library's
# standard headers are precompiled in every lane (LIBSHM_LIBRARY_PCH).
#
# What runs where: the install checks (install_find_package,
# install_readme_tour) run in the normal lane only, since what is installed is
# the same in every lane; the README/docs blocks are built and run in the
# asan lane only (programs of one thread; the normal lane builds README.md's
# against the installed package; tests/readme.cmake). Programs link
# with lld when it is installed. The summary gives each phase's CPU seconds:
# on 2 cores, the CPU of all phases together bounds this command.
#
# Usage: scripts/test.sh [--lane normal|asan|tsan|fuzz|all]... [-- CTEST_ARGS...]
#   e.g. scripts/test.sh --lane normal -- -L unit
#
# Environment:
#   LIBSHM_BUILD_ROOT   where the lane build directories go (default: build/ -> build/ci-<lane>)
#   LIBSHM_JOBS         parallel build and test jobs (default 2)
#   LIBSHM_TEST_BUDGET  seconds for the whole run (default 3600); every build and
#                       ctest run is bounded by what is left of it
#   LIBSHM_FUZZ_SECONDS fuzzing time per target in the fuzz lane (default 20)
#   CI                  when set, warnings are errors (CMakeLists.txt turns LIBSHM_WERROR on)
#
# Skipped tests (GTEST_SKIP; ctest reports them "Skipped") are listed in every
# lane. Only those named in tests/expected_skips.txt are accepted: any other
# skip fails its lane and counts as a failed test.
#
# Exit status: 0 when every lane passed, 1 otherwise. The last line is
# "tests: N passed, M failed, K skipped" summed over the lanes (a lane that
# could not run its tests counts as one failure).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build_root=${LIBSHM_BUILD_ROOT:-$repo/build}
jobs=${LIBSHM_JOBS:-2}
budget=${LIBSHM_TEST_BUDGET:-3600}
fuzz_seconds=${LIBSHM_FUZZ_SECONDS:-20}
per_test_timeout=300  # ctest default for a test without its own TIMEOUT
expected_skips_file=$repo/tests/expected_skips.txt

# Upper bound of each lane's ctest run (seconds), before the overall budget.
declare -A ctest_cap=([normal]=600 [asan]=720 [tsan]=900)

usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

lanes=()
ctest_extra=()
while (($#)); do
  case "$1" in
    --lane)
      [[ $# -ge 2 ]] || { echo "test.sh: --lane needs a value" >&2; exit 2; }
      case "$2" in
        normal | asan | tsan | fuzz) lanes+=("$2") ;;
        all) lanes+=(normal tsan asan fuzz) ;;
        *) echo "test.sh: unknown lane '$2' (normal, asan, tsan, fuzz, all)" >&2; exit 2 ;;
      esac
      shift 2 ;;
    --lane=*) set -- --lane "${1#--lane=}" "${@:2}" ;;
    -h | --help) usage; exit 0 ;;
    --) shift; ctest_extra=("$@"); break ;;
    *) echo "test.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
# The order: the TSan lane's tests (few, and mostly waiting on the daemons and
# nats-server) leave a core idle longer than any other lane's, so the largest
# build, ASan + UBSan, runs beside them; the fuzz build runs beside the asan
# lane's tests.
((${#lanes[@]})) || lanes=(normal tsan asan fuzz)

bash "$here/setup.sh" || exit 1

start=$SECONDS
remaining() { echo $((budget - (SECONDS - start))); }
min() { (($1 < $2)) && echo "$1" || echo "$2"; }
# Sets cpu_now to the CPU seconds (user + system) used so far by the
# waited-for children of this shell, from bash's `times`. The summary gives
# each build and test phase its CPU beside its wall time: on 2 cores the
# command is bounded by the CPU all phases need, since a build runs beside the
# previous lane's tests. Call it in this shell, never in $(...) or a pipe: a
# subshell's children have used nothing yet.
children_cpu() {
  local file=${TMPDIR:-/tmp}/libshm-test-times.$BASHPID line
  times >"$file"
  line=$(tail -n 1 "$file")  # "XmY.YYYs XmY.YYYs": children user, system
  rm -f "$file"
  cpu_now=$(awk '{ n = 0; for (i = 1; i <= 2; i++) { split($i, p, "m"); sub("s", "", p[2]); n += p[1] * 60 + p[2] } printf "%d", n }' <<<"$line")
}

# Sanitizer runtime options: stop at the first report, with a stack. A user's
# own *SAN_OPTIONS come last, so they win. No suppressions.
export ASAN_OPTIONS="halt_on_error=1:print_stacktrace=1:detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1${TSAN_OPTIONS:+:$TSAN_OPTIONS}"

# Runs "$@" bounded by `timeout`; the whole process group is signalled on expiry.
bounded() {
  local secs=$1
  shift
  if ((secs <= 0)); then
    echo "test.sh: time budget of ${budget}s used up; not running: $*" >&2
    return 124
  fi
  timeout --kill-after=20 "$secs" "$@"
}

# TSan (g++ 12) maps its shadow memory at fixed addresses and aborts with
# "unexpected memory mapping" when the kernel's ASLR entropy is high
# (vm.mmap_rnd_bits > 28 on recent kernels). Probe with a tiny program; if it
# fails, lower the entropy (root) or run the lane without ASLR (setarch -R).
# Sets tsan_prefix to the command prefix the lane must run under.
tsan_prefix=()
tsan_probe() {
  local dir=$1 out
  mkdir -p "$dir"
  printf 'int main() { return 0; }\n' >"$dir/tsan_probe.cpp"
  if ! g++ -fsanitize=thread -o "$dir/tsan_probe" "$dir/tsan_probe.cpp" 2>"$dir/tsan_probe.log"; then
    echo "test.sh: cannot build a -fsanitize=thread program:" >&2
    cat "$dir/tsan_probe.log" >&2
    return 1
  fi
  out=$("${tsan_prefix[@]}" "$dir/tsan_probe" 2>&1) && return 0
  echo "test.sh: TSan probe failed: $(head -c 300 <<<"$out")"
  if [[ "$(id -u)" == 0 ]] && command -v sysctl >/dev/null; then
    local bits
    bits=$(sysctl -n vm.mmap_rnd_bits 2>/dev/null || echo "?")
    if [[ "$bits" =~ ^[0-9]+$ ]] && ((bits > 28)) && sysctl -qw vm.mmap_rnd_bits=28 2>/dev/null; then
      echo "test.sh: set vm.mmap_rnd_bits 28 (was $bits) so TSan can map its shadow memory"
      "$dir/tsan_probe" >/dev/null 2>&1 && return 0
    fi
  fi
  if command -v setarch >/dev/null && setarch "$(uname -m)" -R true 2>/dev/null; then
    tsan_prefix=(setarch "$(uname -m)" -R)
    echo "test.sh: running the tsan lane with ASLR off (setarch -R)"
    "${tsan_prefix[@]}" "$dir/tsan_probe" >/dev/null 2>&1 && return 0
  fi
  echo "test.sh: TSan cannot run here: lower vm.mmap_rnd_bits to 28 as root, or allow" \
    "personality(ADDR_NO_RANDOMIZE) for setarch -R" >&2
  return 1
}

declare -A result detail failures
total_passed=0
total_failed=0
total_skipped=0

# tests/expected_skips.txt: "Suite.Test  # reason" per line; blank and
# comment-only lines ignored. Maps each name to its reason.
declare -A expected_skip
while IFS= read -r line; do
  name=${line%%#*}
  name=${name//[[:space:]]/}
  [[ -n "$name" ]] || continue
  reason=${line#*#}
  [[ "$reason" != "$line" ]] || reason="(no reason given)"
  expected_skip[$name]=$(sed 's/^[[:space:]]*//' <<<"$reason")
done < <(cat "$expected_skips_file" 2>/dev/null)

# Lists the tests ctest reported as skipped in the log $1 ("N - Suite.Test
# (Skipped)" in its "did not run" list: gtest_discover_tests sets
# SKIP_REGULAR_EXPRESSION to gtest's "[  SKIPPED ]" marker), and those named
# in the file $2 (one per line: the skips inside suite entries). Sets skipped
# and unexpected (how many of them tests/expected_skips.txt does not name).
check_skips() {
  local log=$1 suite_skips=${2:-} name
  skipped=0
  unexpected=0
  while IFS= read -r name; do
    [[ -n "$name" ]] || continue
    skipped=$((skipped + 1))
    if [[ -n "${expected_skip[$name]+set}" ]]; then
      echo "test.sh: skipped (expected): $name: ${expected_skip[$name]}"
    else
      echo "test.sh: skipped UNEXPECTEDLY: $name (not in tests/expected_skips.txt): FAIL" >&2
      unexpected=$((unexpected + 1))
    fi
  done < <({ sed -nE 's/^[[:space:]]*[0-9]+ - (.+) \((Skipped|Disabled)\)[[:space:]]*$/\1/p' "$log"
    [[ -z "$suite_skips" ]] || cat "$suite_skips"; } | sort -u)
  ((skipped)) || echo "test.sh: no test was skipped"
}

# The tests of a lane whose ctest entries are whole GoogleTest suites
# (LIBSHM_TESTS_BY_SUITE: tests/CMakeLists.txt), from the gtest XML each
# suite's run wrote to the directory $1: one "PASSED|FAILED|SKIPPED Suite.Test"
# line per test.
suite_results() {
  local file
  for file in "$1"/*.xml; do
    [[ -f "$file" ]] || continue
    awk '
      function attr(line, key,   m) {
        if (match(line, " " key "=\"[^\"]*\"")) { m = substr(line, RSTART + length(key) + 3, RLENGTH - length(key) - 4); return m }
        return ""
      }
      function emit() { print (failed ? "FAILED" : (result == "skipped" ? "SKIPPED" : "PASSED")), cls "." name; open = 0 }
      /<testcase / { name = attr($0, "name"); cls = attr($0, "classname"); result = attr($0, "result"); failed = 0
                     if ($0 ~ /\/>[[:space:]]*$/) emit(); else open = 1; next }
      open && /<failure/ { failed = 1 }
      open && /<\/testcase>/ { emit() }' "$file"
  done
}

# A lane is a build phase and a test phase. The build of the next lane runs
# beside the tests of this one, under nice 19 and the idle I/O class: tests
# wait on processes, pipes, sleeps and fsync much of the time and leave a
# core idle, which the build takes, while any test that wants the CPU gets it
# first (a nice-19 process gets about 1.5% of a core against a nice-0 one).
# Tests are discovered when ctest starts (gtest_discover_tests PRE_TEST,
# tests/CMakeLists.txt), so no test binary runs during a build.

declare -A build_pid build_start build_ok lane_prefix
lane_dir() { if [[ "$1" == fuzz ]]; then echo "$build_root/ci-fuzz"; else echo "$build_root/ci-$1"; fi; }

lane_fail() {  # lane, message
  result[$1]=FAIL
  detail[$1]=$2
  total_failed=$((total_failed + 1))
}

# Configures lane $1 and builds it, output in <dir>/build.log.
build_lane() {
  local lane=$1 dir sanitize="" bench=OFF cxx_flags="-O2 -g1 -DNDEBUG" programs_o0=OFF threaded_only=OFF page_programs=OFF by_suite=OFF
  dir=$(lane_dir "$lane")
  if [[ "$lane" == fuzz ]]; then
    bounded "$(remaining)" bash "$here/fuzz.sh" --build-only --build-dir "$dir" --jobs "$jobs"
    local rc=$?
    children_cpu
    echo "test.sh: build CPU ${cpu_now}s"
    return $rc
  fi
  case "$lane" in
    normal) [[ -f "$repo/bench/CMakeLists.txt" ]] && bench=ON; programs_o0=ON ;;
    asan) sanitize="address,undefined" cxx_flags="-O1 -g1" page_programs=ON by_suite=ON ;;  # asserts on (no NDEBUG)
    tsan) sanitize="thread" cxx_flags="-O1 -g1 -DNDEBUG" threaded_only=ON by_suite=ON ;;
  esac
  # lld links the lane's ~90 programs with 2.5x less CPU than GNU ld (the
  # largest test binary: 1.1 s against 2.7 s under ASan).
  local linker=()
  command -v ld.lld >/dev/null &&
    linker=(-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld)
  bounded "$(remaining)" cmake -S "$repo" -B "$dir" -G Ninja "${linker[@]}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$cxx_flags" \
    -DLIBSHM_BUILD_TESTS=ON -DLIBSHM_BUILD_EXAMPLES=ON -DLIBSHM_BUILD_TOOLS=ON \
    -DLIBSHM_BUILD_BENCH=$bench -DLIBSHM_SANITIZE="$sanitize" -DCMAKE_UNITY_BUILD=ON \
    -DLIBSHM_PROGRAMS_AT_O0=$programs_o0 -DLIBSHM_TESTS_THREADED_ONLY=$threaded_only \
    -DLIBSHM_BUILD_PAGE_PROGRAMS=$page_programs -DLIBSHM_TESTS_BY_SUITE=$by_suite \
    -DLIBSHM_LIBRARY_PCH=ON ||
    { echo "test.sh: configure failed"; return 1; }
  bounded "$(remaining)" cmake --build "$dir" --parallel "$jobs"
  local rc=$?
  children_cpu
  echo "test.sh: build CPU ${cpu_now}s"
  return $rc
}

# Starts the build of lane $1; "background" runs it beside the tests, niced.
start_build() {
  local lane=$1 mode=${2:-} dir background=()
  dir=$(lane_dir "$lane")
  mkdir -p "$dir"
  if [[ "$mode" == background ]]; then
    background=(nice -n 19)
    command -v ionice >/dev/null && ionice -c 3 true 2>/dev/null && background+=(ionice -c 3)
  fi
  echo "test.sh: lane $lane: building${mode:+ in the background beside the tests} (log $dir/build.log)"
  build_start[$lane]=$SECONDS
  "${background[@]}" bash -c "$(declare -f bounded remaining children_cpu build_lane lane_dir); $(declare -p \
    here repo build_root jobs budget start); SECONDS=$SECONDS; build_lane $lane" >"$dir/build.log" 2>&1 &
  build_pid[$lane]=$!
}

# Waits for the build of lane $1; prints its end (all of it when it failed).
finish_build() {
  local lane=$1 dir rc
  dir=$(lane_dir "$lane")
  wait "${build_pid[$lane]}"
  rc=$?
  local took=$((SECONDS - build_start[$lane]))
  if ((rc == 0)); then
    build_ok[$lane]="${took}s (CPU $(sed -n 's/^test.sh: build CPU \([0-9]*\)s$/\1/p' "$dir/build.log" | tail -n 1)s)"
    echo "test.sh: lane $lane: built in ${took}s: $(grep -c '' "$dir/build.log") lines of output, last:"
    tail -n 3 "$dir/build.log" | sed 's/^/    /'
    return 0
  fi
  echo "test.sh: lane $lane: BUILD FAILED after ${took}s (exit $rc); its output, errors first:"
  grep -nE 'error|FAILED|warning' "$dir/build.log" | head -n 60 | sed 's/^/    /'
  echo "    ..."
  tail -n 60 "$dir/build.log" | sed 's/^/    /'
  if ((rc == 124 || rc == 137)); then
    lane_fail "$lane" "build stopped by the ${budget}s time budget after ${took}s"
  else
    lane_fail "$lane" "build failed after ${took}s (exit $rc; see above)"
  fi
  return 1
}

test_lane() {
  local lane=$1 dir t0 t_test rc log prefix=()
  dir=$(lane_dir "$lane")
  [[ -z "${lane_prefix[$lane]:-}" ]] || read -ra prefix <<<"${lane_prefix[$lane]}"

  # Test: every test, no label excluded.
  log="$dir/ctest.log"
  rm -rf "$dir/gtest-results"
  t0=$SECONDS
  local cpu0
  children_cpu
  cpu0=$cpu_now
  bounded "$(min "${ctest_cap[$lane]}" "$(remaining)")" "${prefix[@]}" \
    ctest --test-dir "$dir" --output-on-failure --no-tests=error -j "$jobs" \
    --timeout "$per_test_timeout" "${ctest_extra[@]}" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  t_test=$((SECONDS - t0))

  local summary passed=0 failed=0 total skipped unexpected
  summary=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1)
  if [[ "$summary" =~ ([0-9]+)\ tests?\ failed\ out\ of\ ([0-9]+) ]]; then
    failed=${BASH_REMATCH[1]}
    total=${BASH_REMATCH[2]}
    passed=$((total - failed))
  fi
  if ((rc == 124 || rc == 137)); then
    summary="ctest stopped by timeout after ${t_test}s${summary:+; $summary}"
    ((failed > 0)) || failed=1
  fi
  [[ -n "$summary" ]] || { summary="ctest exited $rc without a summary"; failed=1; }
  # Entries that are whole suites (their names end in ".*") count as the
  # tests they ran: a failed suite counts as at least one failed test.
  local suites="$dir/gtest-results.txt" suite_entries suite_failed_entries suite_passed suite_failed suite_skipped
  suite_results "$dir/gtest-results" >"$suites"
  suite_entries=$(grep -cE 'Test +#[0-9]+: .+\.\* ' "$log")
  suite_failed_entries=$(sed -n '/^The following tests FAILED:/,$p' "$log" | grep -cE '^[[:space:]]*[0-9]+ - .+\.\* ')
  suite_passed=$(grep -c '^PASSED ' "$suites")
  suite_failed=$(grep -c '^FAILED ' "$suites")
  suite_skipped=$(grep -c '^SKIPPED ' "$suites")
  if ((suite_entries > 0)); then
    passed=$((passed - (suite_entries - suite_failed_entries) + suite_passed))
    failed=$((failed - suite_failed_entries + (suite_failed > suite_failed_entries ? suite_failed : suite_failed_entries)))
    summary+="; $suite_entries suite entries ran $((suite_passed + suite_failed + suite_skipped)) tests"
  fi
  # ctest counts a skipped test as passed: it is neither here.
  sed -n 's/^SKIPPED //p' "$suites" >"$dir/gtest-skipped.txt"
  check_skips "$log" "$dir/gtest-skipped.txt"
  passed=$((passed > skipped - suite_skipped ? passed - (skipped - suite_skipped) : 0))
  failed=$((failed + unexpected))
  ((skipped == 0)) || summary+="; $skipped skipped ($unexpected unexpected)"
  total_passed=$((total_passed + passed))
  total_failed=$((total_failed + failed))
  total_skipped=$((total_skipped + skipped))
  if ((rc == 0 && unexpected == 0)); then result[$lane]=PASS; else result[$lane]=FAIL; fi
  failures[$lane]=$(failed_tests_report "$log")
  local names
  names=$(sed -n 's/^--- FAILED: //p' <<<"${failures[$lane]}" | paste -sd, - | sed 's/,/, /g')
  [[ -z "$names" ]] || summary+="; failed: $names"
  children_cpu
  detail[$lane]="build ${build_ok[$lane]}, tests ${t_test}s (CPU $((cpu_now - cpu0))s): $summary"
}

# The tests ctest lists under "The following tests FAILED:" in the log $1,
# each with the last lines of its own output, so the end of a long CI log
# still says which test failed and why.
failed_tests_report() {
  local log=$1 name
  while IFS= read -r name; do
    [[ -n "$name" ]] || continue
    echo "--- FAILED: $name"
    awk -v name="$name" '
      function flush() { if (n) { s = n > 40 ? n - 40 : 0; for (i = s + 1; i <= n; i++) print "    " buf[i] } n = 0 }
      index($0, "Test #") && index($0, ": " name " ") && /\*\*\*|Failed|Timeout|Exception/ { grab = 1; n = 0; next }
      grab && (/^ *Start +[0-9]+: / || /^ *[0-9]+\/[0-9]+ Test +#/ || /^[0-9]+% tests passed/) { flush(); grab = 0 }
      grab { buf[++n] = $0 }
      END { if (grab) flush() }' "$log"
  done < <(sed -n '/^The following tests FAILED:/,/^Errors while running/p' "$log" |
    sed -nE 's/^[[:space:]]*[0-9]+ - (.+) \(([A-Za-z ]+)\)[[:space:]]*$/\1/p')
}

# The fuzz lane's test phase: scripts/fuzz.sh runs the targets built by
# build_lane for $fuzz_seconds each, all side by side (the last phase of the
# command, with nothing beside it: three targets two at a time left a core
# idle for a third of the phase); every target is one test.
test_fuzz_lane() {
  local dir t0=$SECONDS log rc passed failed cpu0 targets
  children_cpu
  cpu0=$cpu_now
  dir=$(lane_dir fuzz)
  log="$dir/fuzz-lane.log"
  targets=$(ls "$repo"/tests/fuzz/*_target.cpp | wc -l)
  bounded "$(remaining)" bash "$here/fuzz.sh" --run-only --seconds "$fuzz_seconds" \
    --build-dir "$dir" --jobs "$((targets > jobs ? targets : jobs))" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  passed=$(grep -c '^fuzz: .* PASS' "$log")
  failed=$(grep -c '^fuzz: .* FAIL' "$log")
  ((rc == 0 || failed > 0)) || failed=1  # no target ran: the time budget
  total_passed=$((total_passed + passed))
  total_failed=$((total_failed + failed))
  if ((rc == 0)); then result[fuzz]=PASS; else result[fuzz]=FAIL; fi
  children_cpu
  detail[fuzz]="build ${build_ok[fuzz]}, fuzzing $((SECONDS - t0))s (CPU $((cpu_now - cpu0))s): $passed targets passed, $failed failed (${fuzz_seconds}s each)"
  failures[fuzz]=$(sed -n '/^fuzz: .* FAIL/,/^fuzz: .* PASS/p' "$log" | grep -v ' PASS')
  ((rc == 0)) || [[ -n "${failures[fuzz]}" ]] || failures[fuzz]=$(tail -n 40 "$log")
}

# TSan needs its probe (and maybe setarch) before its lane builds or runs.
shown_lanes=("${lanes[@]}")
if [[ " ${lanes[*]} " == *" tsan "* ]]; then
  mkdir -p "$(lane_dir tsan)"
  if tsan_probe "$(lane_dir tsan)"; then
    lane_prefix[tsan]="${tsan_prefix[*]}"
  else
    lane_fail tsan "TSan cannot run on this machine (see above)"
    mapfile -t lanes < <(printf '%s\n' "${lanes[@]}" | grep -vx tsan)
  fi
fi

# The pipeline: build lane 1; then for each lane, start the next lane's build
# in the background, run this lane's tests, and wait for that build.
((${#lanes[@]} == 0)) || start_build "${lanes[0]}"
for ((i = 0; i < ${#lanes[@]}; i++)); do
  lane=${lanes[i]}
  echo
  echo "==================== lane $lane: $(lane_dir "$lane") ===================="
  finish_build "$lane"
  built=$?
  ((i + 1 < ${#lanes[@]})) && start_build "${lanes[i + 1]}" background
  ((built == 0)) || continue
  if [[ "$lane" == fuzz ]]; then test_fuzz_lane; else test_lane "$lane"; fi
done

for lane in "${shown_lanes[@]}"; do
  [[ -n "${failures[$lane]:-}" ]] || continue
  echo
  echo "==================== lane $lane: failed tests (last lines of each) ===================="
  echo "${failures[$lane]}"
done

echo
echo "==================== summary ($((SECONDS - start))s of ${budget}s budget) ===================="
status=0
for lane in "${shown_lanes[@]}"; do
  printf 'lane %-6s %s  %s\n' "$lane" "${result[$lane]}" "${detail[$lane]}"
  [[ "${result[$lane]}" == PASS ]] || status=1
done
echo "tests: $total_passed passed, $total_failed failed, $total_skipped skipped"
exit $status
