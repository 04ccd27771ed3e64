#!/usr/bin/env bash
# The demo (README): installs only what it uses (scripts/setup.sh --demo),
# builds only the programs it runs (Release: five examples, shmctl and
# shm-sidecar; no tests, benchmarks or bridge), then shows the runtime in one
# run. Every step is separate processes sharing segments in one root:
#
#   sidecar  shm-sidecar watches the root and serves /metrics
#   ring     ring_consumer creates the ring 'demo-ring' and verifies every
#            message (sequence + CRC32C); ring_producer opens it and streams
#   relay    relay_ticker: writer processes publish prices for many symbols at
#            full speed into a keyed relay (lww, Conflate); a slow reader drains
#            a fixed rate and still ends with the latest price of every symbol:
#            many more writes than entries delivered (conflation)
#   spill    relay_log --spill: the reader stops, the writer never blocks, the
#            oldest lines go to page files on disk; then every line arrives in order
#   egress   egress_transport: a transport process drains the egress over a
#            lossy link and is killed -9 halfway; another takes over and
#            replays; every payload is acknowledged and delivered once
#   metrics  a few lines of the sidecar's /metrics
#   shmctl   `shmctl ls`, then `shmctl inspect demo-ring`
#
# and a summary: each step PASS or FAIL with its time, then the line
# "demo: all N steps passed ..." (or "demo: FAILED ...").
#
# Usage: scripts/demo.sh [--count N] [--min-size B] [--max-size B] [--capacity BYTES] [--spin]
#                        [--bin-dir DIR]
#   --count ...    the ring step: messages, their sizes, the ring's size, spin waits
#   --bin-dir DIR  use the programs already built in DIR: no setup, no build
#                  (the ctest entry `demo` runs the demo this way)
#
# Environment:
#   LIBSHM_BUILD_ROOT  build directory parent (default: build/ -> build/demo)
#   LIBSHM_DEMO_ROOT   segment directory, emptied first (default /dev/shm/libshm-demo)
#   LIBSHM_DEMO_PORT   first loopback port tried for the sidecar (default 9464)
#   LIBSHM_JOBS        parallel build jobs (default 2)
#
# Exit status: 0 when every step passed; non-zero otherwise. The segments stay
# in the root afterwards, for shmctl.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build="${LIBSHM_BUILD_ROOT:-$repo/build}/demo"
root=${LIBSHM_DEMO_ROOT:-/dev/shm/libshm-demo}
port=${LIBSHM_DEMO_PORT:-9464}
jobs=${LIBSHM_JOBS:-2}
ring=demo-ring
count=200000
min_size=1
max_size=4096
capacity=4MiB
mode=--blocking
bin=""

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    --count) count=$2; shift 2 ;;
    --min-size) min_size=$2; shift 2 ;;
    --max-size) max_size=$2; shift 2 ;;
    --capacity) capacity=$2; shift 2 ;;
    --spin) mode=--spin; shift ;;
    --bin-dir) bin=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "demo.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$count" =~ ^[1-9][0-9]*$ ]] || { echo "demo.sh: --count must be a positive number" >&2; exit 2; }

# The programs the demo runs: exactly the targets it builds.
examples=(ring_producer ring_consumer relay_ticker relay_log egress_transport)
tools=(shmctl shm-sidecar)

section() { printf '\n==== %s\n' "$*"; }

# The summary: one row per step, "name|PASS or FAIL|seconds|what it showed".
rows=()
failed=0
record() {  # name, rc, seconds, note
  local verdict=PASS
  if (($2 != 0)); then
    verdict="FAIL (exit $2)"
    failed=$((failed + 1))
  fi
  rows+=("$1|$verdict|$3|$4")
}

t_start=$SECONDS
t_packages=0
t_build=0
if [[ -z "$bin" ]]; then
  section "packages: scripts/setup.sh --demo (only what the demo builds and runs)"
  t0=$SECONDS
  bash "$here/setup.sh" --demo
  t_packages=$((SECONDS - t0))

  # -O2, not Release's -O3: a quarter less compile time (CLI11, header-only,
  # is most of each program's), the same speed of the ring. Unity build: the
  # library compiles one unit per area (scripts/test.sh says why).
  section "build: Release -O2, ${#examples[@]} examples + ${tools[*]} in $build (-j$jobs)"
  t0=$SECONDS
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" -DCMAKE_UNITY_BUILD=ON \
    -DLIBSHM_BUILD_TESTS=OFF -DLIBSHM_BUILD_BENCH=OFF -DLIBSHM_BUILD_EXAMPLES=ON \
    -DLIBSHM_BUILD_TOOLS=ON -DLIBSHM_BUILD_BRIDGE=OFF >/dev/null
  timeout 3600 cmake --build "$build" --parallel "$jobs" --target "${examples[@]}" "${tools[@]}"
  t_build=$((SECONDS - t0))
  bin="$build/bin"
fi
for exe in "${examples[@]}" "${tools[@]}"; do
  [[ -x "$bin/$exe" ]] || { echo "demo.sh: $bin/$exe was not built" >&2; exit 1; }
done
t_run0=$SECONDS

# A root of our own, emptied first, so the demo never touches other segments;
# the spill pages and the sidecar's log go to a scratch folder.
rm -rf "$root"
mkdir -m 0700 -p "$root"
export LIBSHM_ROOT=$root
work=$(mktemp -d "${TMPDIR:-/tmp}/libshm-demo-XXXXXX")

# Everything started here is stopped on exit, however the script ends.
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Runs one step: its command's output as it comes (kept in $work/<name>.out),
# then its row in the summary: what the output says (summarize), else the note.
step() {  # name, note, command...
  local name=$1 note=$2 t0=$SECONDS rc=0 said
  shift 2
  "$@" > >(tee "$work/$name.out") 2>&1 || rc=$?
  wait $! 2>/dev/null || true  # tee has written everything
  said=$(summarize "$name" <"$work/$name.out" 2>/dev/null | sed 's/^ *//; s/[ ;]*$//' || true)
  record "$name" "$rc" $((SECONDS - t0)) "${said:-$note}"
  return 0
}

# The summary's line for a step, from its output (empty when the output has
# not what is looked for: the step's note stands instead).
summarize() {
  local out
  out=$(cat)
  case "$1" in
    ring) printf '%s %s\n' \
      "$(sed -nE 's/^ring_consumer: received ([0-9]+) messages.* ([0-9.]+ MB\/s)$/\1 messages between two processes, \2;/p' <<<"$out")" \
      "$(sed -nE 's/^ring_consumer: verification OK: (.*)/\1/p' <<<"$out")" ;;
    relay) sed -nE 's/^symbols ([0-9]+) writers ([0-9]+): ([0-9]+) writes, ([0-9]+) conflated, ([0-9]+) drained.*/\3 writes by \2 processes, \5 entries delivered (\4 conflated); latest price of all \1 symbols/p' <<<"$out" ;;
    spill) printf '%s %s\n' \
      "$(sed -nE 's/^reader paused: ([0-9]+) cold pages \(([0-9]+) bytes on disk\).*/\1 pages (\2 bytes) on disk while the reader stopped;/p' <<<"$out")" \
      "$(sed -nE 's/^([0-9]+) of [0-9]+ lines in order.*writer blocked ([0-9]+) times$/\1 lines back in order, writer blocked \2 times/p' <<<"$out")" ;;
    egress) printf '%s %s\n' \
      "$(sed -nE 's/^killed transport ([0-9]+) \(SIGKILL\) at ([0-9]+) of ([0-9]+).*/transport \1 killed -9 at \2 of \3 acknowledged;/p' <<<"$out")" \
      "$(sed -nE 's/^receiver: ([0-9]+) of [0-9]+ payloads delivered, each once and in order, 0 corrupt; ([0-9]+) duplicate.*/all \1 acknowledged, delivered once (\2 duplicates dropped)/p' <<<"$out")" ;;
    metrics) sed -nE 's/^([0-9]+) samples;.*/\1 samples; one libshm_segment_info per segment, counters of each/p' <<<"$out" ;;
    shmctl) printf '%s segments listed, the ring inspected\n' \
      "$(sed -n '/^NAME /,/^$/p' <<<"$out" | grep -cvE '^(NAME |$)')" ;;
    *) return 1 ;;
  esac
}

# 1. The sidecar, first, so it sees every segment appear.
while port_in_use "$port"; do port=$((port + 1)); done
section "sidecar: shm-sidecar --root $root --listen 127.0.0.1:$port (log: $work/sidecar.log)"
t0=$SECONDS
"$bin/shm-sidecar" --root "$root" --listen "127.0.0.1:$port" --interval 100 \
  >"$work/sidecar.log" 2>&1 &
sidecar_pid=$!
pids+=("$sidecar_pid")
sidecar_rc=1
for _ in $(seq 50); do
  if port_in_use "$port"; then sidecar_rc=0; break; fi
  kill -0 "$sidecar_pid" 2>/dev/null || break
  sleep 0.1
done
if ((sidecar_rc == 0)); then
  echo "shm-sidecar (pid $sidecar_pid) is serving http://127.0.0.1:$port/metrics"
else
  echo "demo.sh: shm-sidecar did not start serving; its log:" >&2
  cat "$work/sidecar.log" >&2
fi
record sidecar "$sidecar_rc" $((SECONDS - t0)) "watches $root, serves /metrics on 127.0.0.1:$port"

# 2. A ring between two processes.
ring_step() {
  # The consumer creates the ring; the producer opens it (retrying until it
  # exists), so both are independent processes that only share the ring file.
  local sizes=(--min-size "$min_size" --max-size "$max_size") consumer_pid producer_rc=0 consumer_rc=0
  timeout 300 "$bin/ring_consumer" --name "$ring" --create --capacity "$capacity" --count "$count" \
    "${sizes[@]}" "$mode" &
  consumer_pid=$!
  pids+=("$consumer_pid")
  timeout 300 "$bin/ring_producer" --name "$ring" --count "$count" "${sizes[@]}" "$mode" ||
    producer_rc=$?
  wait "$consumer_pid" || consumer_rc=$?
  if ((producer_rc != 0 || consumer_rc != 0)); then
    echo "demo.sh: ring: producer exit $producer_rc, consumer exit $consumer_rc" >&2
    return 1
  fi
  echo "ring: all $count messages arrived in order with valid checksums"
}
section "ring: $count messages of $min_size..$max_size bytes, producer -> '$ring' ($capacity, ${mode#--}) -> consumer"
step ring "$count messages, two processes, each checked (sequence + CRC32C)" ring_step

# 3. A keyed relay: writers at full speed, a slow reader, conflation.
section "relay: relay_ticker: 2 writer processes x 2000 symbols at full speed for 2 s; the reader drains 20000 entries/s"
step relay "keyed (lww), slow reader: writes conflated per symbol; the latest price of each arrives" \
  timeout 120 "$bin/relay_ticker" --symbols 2000 --writers 2 --seconds 2 --rate 20000 --keep

# 4. Spill: the reader stops, the writer does not block, the overflow goes to disk.
section "spill: relay_log --spill: the reader stops for 1 s, the writer goes on; pages in $work/spill"
step spill "reader stopped, writer never blocked; overflow paged to disk, all lines back in order" \
  timeout 120 "$bin/relay_log" --spill --lines 20000 --pause-ms 1000 --spill-dir "$work/spill" --keep

# 5. An egress whose transport process is killed -9 halfway.
section "egress: egress_transport: 20000 payloads over a lossy link; the transport is killed -9 halfway"
step egress "transport killed -9 halfway and replaced; every payload acknowledged, delivered once" \
  timeout 120 "$bin/egress_transport" demo --count 20000 --loss 0.02 --kill-every 10000 --keep

# 6. The sidecar's metrics of what the steps left in the root.
metrics_step() {
  local body
  sleep 0.3  # a duty cycle (100 ms) sees the last segments
  body=$(timeout 10 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" >&3
    cat <&3' _ "$port" | tr -d '\r') || {
    echo "demo.sh: no answer from http://127.0.0.1:$port/metrics" >&2
    return 1
  }
  grep -q '^HTTP/1\.[01] 200' <<<"$body" || {
    echo "demo.sh: /metrics answered: $(head -n 1 <<<"$body")" >&2
    return 1
  }
  body=$(awk 'body && NF && !/^#/ {print} /^$/ {body = 1}' <<<"$body")
  echo "$(grep -c '' <<<"$body") samples; some of them:"
  # One identity line per segment, then a few counters of each step.
  grep -E '^libshm_segment_info\{' <<<"$body" || true
  grep -E '^libshm_(spsc_ring_records_pushed|relay_[a-z_]*(writes|conflated|pages_sealed)|egress_[a-z_]*(acked|reconnects))_total\{' \
    <<<"$body" | head -n 12 || true
  grep -q "segment=\"$ring\"" <<<"$body" || {
    echo "demo.sh: /metrics does not show the ring '$ring'" >&2
    return 1
  }
}
section "metrics: http://127.0.0.1:$port/metrics (shm-sidecar)"
step metrics "the sidecar's Prometheus metrics of the segments above" metrics_step

# 7. shmctl: what is in the root, and one segment in detail.
shmctl_step() {
  "$bin/shmctl" --root "$root" ls || return 1
  section "shmctl --root $root inspect $ring"
  "$bin/shmctl" --root "$root" inspect "$ring"
}
section "shmctl --root $root ls"
step shmctl "ls of the root, inspect of the ring" shmctl_step

kill "$sidecar_pid" 2>/dev/null || true
wait "$sidecar_pid" 2>/dev/null || true

t_run=$((SECONDS - t_run0))
section "summary"
steps=${#rows[@]}
for row in "${rows[@]}"; do
  IFS='|' read -r name verdict secs note <<<"$row"
  printf '  %-8s %-6s %4ss  %s\n' "$name" "$verdict" "$secs" "$note"
done
timing="packages ${t_packages}s, build ${t_build}s, run ${t_run}s, total $((SECONDS - t_start))s"
echo
if ((failed == 0)); then
  echo "demo: all $steps steps passed ($timing)"
  echo "demo: the segments stay in $root; try: $bin/shmctl --root $root inspect ticker"
  exit 0
fi
echo "demo: FAILED: $failed of $steps steps failed ($timing)"
exit 1
