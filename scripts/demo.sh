#!/usr/bin/env bash
# The demo (README): installs what is missing, builds the examples and tools
# (Release, no tests), then streams messages between two separate processes
# through a shared-memory ring and shows the ring with shmctl:
#
#   1. shm-sidecar (when built) watches the demo root and serves metrics
#   2. ring_consumer creates the ring 'demo-ring' and verifies every message
#      (sequence continuity + CRC32C); ring_producer opens it and streams
#   3. both print their throughput; then `shmctl ls` and `shmctl inspect demo-ring`
#
# Usage: scripts/demo.sh [--count N] [--min-size B] [--max-size B] [--capacity BYTES] [--spin]
#
# Environment:
#   LIBSHM_BUILD_ROOT  build directory parent (default: build/ -> build/demo)
#   LIBSHM_DEMO_ROOT   segment directory, emptied first (default /dev/shm/libshm-demo)
#   LIBSHM_DEMO_PORT   first loopback port tried for the sidecar (default 9464)
#   LIBSHM_JOBS        parallel build jobs (default 2)
#
# Exit status: 0 when every message arrived intact and shmctl could read the
# ring; non-zero otherwise.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build="${LIBSHM_BUILD_ROOT:-$repo/build}/demo"
root=${LIBSHM_DEMO_ROOT:-/dev/shm/libshm-demo}
port=${LIBSHM_DEMO_PORT:-9464}
jobs=${LIBSHM_JOBS:-2}
ring=demo-ring
count=2000000
min_size=1
max_size=4096
capacity=4MiB
mode=--blocking

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    --count) count=$2; shift 2 ;;
    --min-size) min_size=$2; shift 2 ;;
    --max-size) max_size=$2; shift 2 ;;
    --capacity) capacity=$2; shift 2 ;;
    --spin) mode=--spin; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "demo.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

section() { printf '\n==== %s\n' "$*"; }

bash "$here/setup.sh"

section "build (Release, examples + tools) in $build"
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DLIBSHM_BUILD_TESTS=OFF -DLIBSHM_BUILD_BENCH=OFF \
  -DLIBSHM_BUILD_EXAMPLES=ON -DLIBSHM_BUILD_TOOLS=ON >/dev/null
timeout 3600 cmake --build "$build" --parallel "$jobs"
bin="$build/bin"
for exe in ring_producer ring_consumer; do
  [[ -x "$bin/$exe" ]] || { echo "demo.sh: $bin/$exe was not built" >&2; exit 1; }
done

# A root of our own, emptied first, so the demo never touches other segments.
rm -rf "$root"
mkdir -m 0700 -p "$root"
export LIBSHM_ROOT=$root

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
}
trap cleanup EXIT

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

sidecar_pid=""
if [[ -x "$bin/shm-sidecar" ]]; then
  while port_in_use "$port"; do port=$((port + 1)); done
  section "sidecar: shm-sidecar --root $root --listen 127.0.0.1:$port"
  "$bin/shm-sidecar" --root "$root" --listen "127.0.0.1:$port" &
  sidecar_pid=$!
  pids+=("$sidecar_pid")
  sleep 0.5
  if ! kill -0 "$sidecar_pid" 2>/dev/null; then
    echo "demo.sh: shm-sidecar exited at start; going on without it" >&2
    sidecar_pid=""
  fi
else
  section "sidecar: $bin/shm-sidecar is not built; going on without it"
fi

section "stream: $count messages of $min_size..$max_size bytes through '$ring' ($capacity, ${mode#--})"
# The consumer creates the ring; the producer opens it (retrying until it
# exists), so both are independent processes that only share the ring file.
sizes=(--min-size "$min_size" --max-size "$max_size")
timeout 600 "$bin/ring_consumer" --name "$ring" --create --capacity "$capacity" --count "$count" \
  "${sizes[@]}" "$mode" &
consumer_pid=$!
pids+=("$consumer_pid")
producer_rc=0
timeout 600 "$bin/ring_producer" --name "$ring" --count "$count" "${sizes[@]}" "$mode" ||
  producer_rc=$?
consumer_rc=0
wait "$consumer_pid" || consumer_rc=$?

status=0
if ((producer_rc != 0 || consumer_rc != 0)); then
  echo "demo.sh: FAILED: producer exit $producer_rc, consumer exit $consumer_rc" >&2
  status=1
else
  echo "demo.sh: all $count messages arrived in order with valid checksums"
fi

if [[ -x "$bin/shmctl" ]]; then
  section "shmctl --root $root ls"
  "$bin/shmctl" --root "$root" ls || status=1
  section "shmctl --root $root inspect $ring"
  "$bin/shmctl" --root "$root" inspect "$ring" || status=1
else
  section "shmctl: $bin/shmctl is not built; skipping ls/inspect"
fi

if [[ -n "$sidecar_pid" ]]; then
  section "sidecar metrics (http://127.0.0.1:$port/metrics, first lines)"
  if exec 3<>"/dev/tcp/127.0.0.1/$port"; then
    printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
    # Skip the HTTP headers and the # HELP/# TYPE lines.
    timeout 5 cat <&3 | tr -d '\r' | awk 'body && NF && !/^#/ {print} /^$/ {body = 1}' |
      head -n 20 || true
    exec 3>&-
  fi
  section "stopping the sidecar"
  kill "$sidecar_pid" 2>/dev/null || true
  wait "$sidecar_pid" 2>/dev/null || true
fi

section "done: the ring stays in $root; try: $bin/shmctl --root $root inspect $ring"
exit $status
