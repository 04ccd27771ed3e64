#!/usr/bin/env bash
# Runs the curated mutants (tests/mutants/*.diff) against the suite, on
# demand (not part of the test command): each mutant is a realistic one-line
# bug, with the tests that must catch it named in its header
# ("# tests: GTEST_FILTER"). For each one: apply it to the work tree,
# rebuild what it touches (ninja rebuilds only what depends on the file),
# run the named tests of both test binaries, revert it. A mutant the tests
# do not fail on "survived": that is a missing test.
#
# Usage: scripts/mutants.sh [MUTANT...]   (names or paths; default: all)
# Environment: LIBSHM_MUTANTS_BUILD (default build/mutants), LIBSHM_JOBS (2).
#
# Exit status: 0 when every mutant was killed, 1 when any survived or could
# not be applied or built, 2 on a dirty tree (the mutants apply to it). The
# last line is "mutants: N killed, M survived".
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build=${LIBSHM_MUTANTS_BUILD:-$repo/build/mutants}
jobs=${LIBSHM_JOBS:-2}
cd "$repo" || exit 2

if ! git diff --quiet -- libshm daemons tools; then
  echo "mutants.sh: libshm/, daemons/ or tools/ has uncommitted changes; the mutants apply to the tree" >&2
  exit 2
fi

mutants=()
if (($#)); then
  for m in "$@"; do
    [[ -f "$m" ]] && mutants+=("$m") || mutants+=("tests/mutants/${m%.diff}.diff")
  done
else
  mutants=(tests/mutants/*.diff)
fi

applied=""
revert() { [[ -n "$applied" ]] && git apply -R "$applied" && applied=""; }
trap 'revert' EXIT
trap 'revert; exit 130' INT TERM

targets=(shm_unit_tests shm_integration_tests shm_process_tests shmctl shm-sidecar)
if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DLIBSHM_BUILD_TESTS=ON -DLIBSHM_BUILD_EXAMPLES=ON -DLIBSHM_BUILD_TOOLS=ON \
    -DLIBSHM_BUILD_BENCH=OFF -DCMAKE_UNITY_BUILD=ON >/dev/null || exit 1
fi
echo "mutants.sh: building the unmutated tree in $build"
cmake --build "$build" --parallel "$jobs" >"$build/mutants-build.log" 2>&1 ||
  { echo "mutants.sh: the unmutated tree does not build (see $build/mutants-build.log)" >&2; exit 1; }

killed=0
survived=0
for m in "${mutants[@]}"; do
  name=$(basename "$m" .diff)
  filter=$(sed -n 's/^# tests: //p' "$m" | head -1)
  if [[ -z "$filter" ]] || ! git apply --check "$m" 2>/dev/null; then
    echo "SURVIVED $name: no '# tests:' line, or it does not apply to this tree"
    survived=$((survived + 1))
    continue
  fi
  git apply "$m" && applied=$m
  if ! cmake --build "$build" --parallel "$jobs" --target "${targets[@]}" >"$build/$name.build.log" 2>&1; then
    echo "KILLED   $name: the mutant does not build (see $build/$name.build.log)"
    killed=$((killed + 1))
    revert
    continue
  fi
  ran=0
  failed=0
  for bin in "$build/tests/shm_unit_tests" "$build/tests/shm_integration_tests" \
    "$build/tests/shm_process_tests"; do
    out=$(timeout 600 "$bin" --gtest_filter="$filter" --gtest_brief=1 2>&1)
    rc=$?
    n=$(grep -oE '^\[==========\] [0-9]+ tests? from' <<<"$out" | tail -1 | grep -oE '[0-9]+' | head -1)
    ran=$((ran + ${n:-0}))
    ((rc != 0)) && failed=1
  done
  revert
  if ((failed)); then
    echo "KILLED   $name ($ran tests ran)"
    killed=$((killed + 1))
  elif ((ran == 0)); then
    echo "SURVIVED $name: its filter '$filter' matched no test"
    survived=$((survived + 1))
  else
    echo "SURVIVED $name: $ran tests ($filter) passed with the mutant in"
    survived=$((survived + 1))
  fi
done
# Leave the build matching the tree.
cmake --build "$build" --parallel "$jobs" --target "${targets[@]}" >/dev/null 2>&1
echo "mutants: $killed killed, $survived survived"
((survived == 0))
