#!/usr/bin/env bash
# The two-host demo: two "hosts" on one machine (two segment roots that share
# nothing but a NATS JetStream server on loopback), a ring on each, and
# shm-bridge carrying the stream from host A's ring to host B's:
#
#   host A: ring_producer -> ring 'orders' -> shm-bridge export
#           -> JetStream (nats-server -js, started here on a free loopback port)
#   host B: shm-bridge import -> ring 'orders' -> ring_consumer
#
# Halfway through the stream the export bridge is killed with kill -9 and
# started again: ring_consumer checks every message (sequence continuity +
# CRC32C), so one lost or duplicated message fails the demo. At the end,
# `shmctl inspect` shows each bridge's state segment (the last intent, the
# counters) and `shmctl ls` both roots.
#
# Usage: scripts/demo_two_hosts.sh [--count N] [--bin-dir DIR]
#   --count N      messages (default 200000, 16..1024 bytes each)
#   --bin-dir DIR  use the programs in DIR (shm-bridge, ring_producer,
#                  ring_consumer, shmctl) instead of installing and building
#                  (the test suite runs the demo this way)
#
# Environment:
#   LIBSHM_BUILD_ROOT  build directory parent (default: build/ -> build/demo)
#   LIBSHM_JOBS        parallel build jobs (default 2)
#
# Exit status: 0 when every message reached host B once, in order, intact.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
count=200000
bin=""

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    --count) count=$2; shift 2 ;;
    --bin-dir) bin=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "demo_two_hosts.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$count" =~ ^[1-9][0-9]*$ ]] || { echo "demo_two_hosts.sh: --count must be a positive number" >&2; exit 2; }

section() { printf '\n==== %s\n' "$*"; }

if [[ -z "$bin" ]]; then
  bash "$here/setup.sh"
  build="${LIBSHM_BUILD_ROOT:-$repo/build}/demo"
  section "build (Release, examples + tools) in $build"
  # The bridge explicitly: scripts/demo.sh shares this build directory and
  # turns it off there.
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DLIBSHM_BUILD_TESTS=OFF -DLIBSHM_BUILD_BENCH=OFF \
    -DLIBSHM_BUILD_EXAMPLES=ON -DLIBSHM_BUILD_TOOLS=ON -DLIBSHM_BUILD_BRIDGE=ON >/dev/null
  timeout 3600 cmake --build "$build" --parallel "${LIBSHM_JOBS:-2}"
  bin="$build/bin"
fi
for exe in shm-bridge ring_producer ring_consumer shmctl; do
  [[ -x "$bin/$exe" ]] || { echo "demo_two_hosts.sh: $bin/$exe was not built" >&2; exit 1; }
done
nats=$(command -v nats-server || true)
[[ -n "$nats" ]] || nats=/usr/sbin/nats-server
[[ -x "$nats" ]] || { echo "demo_two_hosts.sh: nats-server is not installed (scripts/setup.sh installs it)" >&2; exit 1; }

# Everything lives in one temporary folder: the two roots, the NATS store,
# the logs. Every process started here is stopped on exit.
work=$(mktemp -d /dev/shm/libshm-two-hosts-XXXXXX)
mkdir -m 0700 "$work/host-a" "$work/host-b"
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# Waits up to $2 seconds for the shell condition $1.
wait_for() {
  local deadline=$((SECONDS + $2))
  until eval "$1"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.05
  done
}
# The export bridge's `moved` counter, read through shmctl (0 until it exists).
moved() {
  "$bin/shmctl" --root "$work/host-a" inspect orders-bridge-export --json 2>/dev/null |
    sed -n 's/.*"moved": \([0-9]*\).*/\1/p' | head -n 1 | grep . || echo 0
}

port=$((20000 + RANDOM % 20000))
while port_in_use "$port"; do port=$((port + 1)); done
url="nats://127.0.0.1:$port"
section "JetStream: nats-server -js on $url (store $work/nats)"
"$nats" -js -a 127.0.0.1 -p "$port" -sd "$work/nats" -l "$work/nats.log" &
pids+=($!)
wait_for "port_in_use $port" 20 || { echo "demo_two_hosts.sh: nats-server did not start" >&2; cat "$work/nats.log" >&2; exit 1; }

sizes=(--min-size 16 --max-size 1024)
section "host B: ring_consumer creates 'orders' and waits for $count messages"
"$bin/ring_consumer" --root "$work/host-b" --name orders --create --capacity 1MiB \
  --count "$count" "${sizes[@]}" --timeout 120 >"$work/consumer.log" 2>&1 &
consumer_pid=$!
pids+=("$consumer_pid")
section "host A: ring_producer creates 'orders' and writes $count messages (it blocks while the ring is full)"
# Its ring fills until the export bridge is READY (and again while that bridge
# is restarted), which may take up to 30 s each: its wait is the consumer's.
"$bin/ring_producer" --root "$work/host-a" --name orders --create --capacity 1MiB \
  --count "$count" "${sizes[@]}" --timeout 120 >"$work/producer.log" 2>&1 &
producer_pid=$!
pids+=("$producer_pid")
wait_for "[[ -e $work/host-a/orders && -e $work/host-b/orders ]]" 30 ||
  { echo "demo_two_hosts.sh: the rings were not created" >&2; cat "$work"/*.log >&2; exit 1; }

export_args=(export --server "$url" --root "$work/host-a" --subject orders.a --source orders
  --egress orders-out --create-stream ORDERS)
import_args=(import --server "$url" --root "$work/host-b" --subject orders.a --durable host-b
  --dest orders --create-stream ORDERS)
start_bridge() {  # $1: log name, then the bridge's arguments
  local log="$work/$1.log"
  shift
  "$bin/shm-bridge" "$@" >>"$log" 2>&1 &
  bridge_pid=$!
  pids+=("$bridge_pid")
  wait_for "grep -q READY $log" 30 || { echo "demo_two_hosts.sh: shm-bridge $1 did not start" >&2; cat "$log" >&2; exit 1; }
}
section "bridges: shm-bridge ${export_args[*]}"
section "         shm-bridge ${import_args[*]}"
start_bridge export "${export_args[@]}"
exporter=$bridge_pid
start_bridge import "${import_args[@]}"
importer=$bridge_pid

half=$((count / 2))
section "streaming; at $half messages moved, kill -9 of the export bridge"
wait_for "(( \$(moved) >= half ))" 300 || { echo "demo_two_hosts.sh: the stream stalled" >&2; cat "$work"/*.log >&2; exit 1; }
kill -9 "$exporter"
wait "$exporter" 2>/dev/null || true
echo "killed the export bridge after $(moved) messages moved; starting it again"
start_bridge export "${export_args[@]}"
exporter=$bridge_pid

status=0
wait "$producer_pid" || { echo "demo_two_hosts.sh: ring_producer failed:" >&2; cat "$work/producer.log" >&2; status=1; }
if wait "$consumer_pid"; then
  section "host B received every message once, in order, intact"
  cat "$work/consumer.log"
else
  echo "demo_two_hosts.sh: FAILED: ring_consumer on host B:" >&2
  cat "$work/consumer.log" >&2
  status=1
fi

kill "$exporter" "$importer" 2>/dev/null || true
wait "$exporter" "$importer" 2>/dev/null || true
section "shmctl --root host-a inspect orders-bridge-export"
"$bin/shmctl" --root "$work/host-a" inspect orders-bridge-export || status=1
section "shmctl --root host-b inspect orders-bridge-import"
"$bin/shmctl" --root "$work/host-b" inspect orders-bridge-import || status=1
section "shmctl --root host-a ls"
"$bin/shmctl" --root "$work/host-a" ls || status=1
section "shmctl --root host-b ls"
"$bin/shmctl" --root "$work/host-b" ls || status=1
section "bridge logs (export, then import)"
cat "$work/export.log" "$work/import.log"
exit $status
