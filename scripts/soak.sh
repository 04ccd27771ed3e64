#!/usr/bin/env bash
# Soak v1: producer and consumer processes over every ring kind the soak knows
# (SpscRing today), the sidecar watching them, and a random kill -9 every
# --kill-interval seconds followed by a restart of the victim. At the end:
# stop everything cleanly, verify, clean up, print a summary; exit 1 on any
# violation.
#
#   scripts/soak.sh [--build-dir DIR] [--duration S] [--kill-interval S]
#                   [--pairs N] [--rate R] [--seed N] [--keep]
#
# What is verified (details in tests/helpers/soak_common.hpp, soak_verify.cpp):
#   - nothing lost: every record a producer published reaches the consumer log;
#   - nothing duplicated, except at-least-once redelivery of the batch a killed
#     consumer had in hand (peeked and logged, maybe not released) - a new
#     consumer incarnation may start no earlier than that batch's first record;
#   - exactly-once publication across producer kills (a partial batch is never
#     visible; a restarted producer continues at the first unpublished number);
#   - nothing corrupt: every record passes its CRC, and `shmctl verify --all`
#     (when shmctl is built) finds no violated invariant;
#   - every process stops cleanly at the end, the sidecar logs no error and
#     exits 0, every killed process recovers (time from kill to first progress);
#   - no stale segment: after a `shm-sidecar --once --gc-ephemeral` pass the
#     root holds nothing but the sidecar's lock file.
#
# Adding a kind = one more block like the spsc_* functions below (register its
# processes, verify its logs) and its name in KINDS.
set -u -o pipefail

usage() {
  sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD_DIR=""
DURATION=30
KILL_INTERVAL=1
PAIRS=2
RATE=20000            # records per second per producer (a ceiling)
PRODUCER_BATCH=16     # records per commit, at most
CONSUMER_BATCH=32     # records per release, at most = the most a kill can redeliver
HOLD_US=400           # helpers pause up to this long between journal/log and commit/release,
                      # so kills often land in those windows (the interesting ones)
SIDECAR_INTERVAL=50   # ms
SEED=$$
KEEP=0
while (($#)); do
  case "$1" in
    --build-dir) BUILD_DIR=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --kill-interval) KILL_INTERVAL=$2; shift 2 ;;
    --pairs) PAIRS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) usage ;;
    *) echo "soak: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n "$BUILD_DIR" ]] || BUILD_DIR="$script_dir/../build"
BIN="$BUILD_DIR/bin"
HELPERS="$BUILD_DIR/test-helpers"
for exe in "$BIN/shm-sidecar" "$HELPERS/test_soak_producer" "$HELPERS/test_soak_consumer" \
           "$HELPERS/test_soak_verify"; do
  if [[ ! -x "$exe" ]]; then
    echo "soak: $exe not found; build first (cmake --build $BUILD_DIR)" >&2
    exit 2
  fi
done
RANDOM=$SEED

WORK=$(mktemp -d "${TMPDIR:-/tmp}/libshm-soak-XXXXXX")
ROOT=$(mktemp -d /dev/shm/libshm-soak-XXXXXX)
export LIBSHM_ROOT=$ROOT
VIOLATIONS=()
violation() { VIOLATIONS+=("$*"); echo "soak: VIOLATION: $*" >&2; }
now_ns() { local t=${EPOCHREALTIME/./}; echo "${t}000"; }
log() { printf 'soak: %s\n' "$*"; }

# ---------------------------------------------------------------- processes
# register PHASE NAME COMMAND...: PHASE orders the clean stop (1 first).
declare -a NAMES=()
declare -A CMD=() PID=() PHASE=()
register() {
  local phase=$1 name=$2
  shift 2
  NAMES+=("$name")
  PHASE[$name]=$phase
  CMD[$name]=$(printf '%q ' "$@")
}
start_proc() {
  local name=$1
  # exec: $! is the program itself, so kill -9 hits it and not a subshell.
  eval "exec ${CMD[$name]}" >>"$WORK/$name.out" 2>&1 &
  PID[$name]=$!
}
alive() { kill -0 "${PID[$1]}" 2>/dev/null; }
# Waits for NAME to exit (at most $2 seconds, then kills it); sets REAPED to
# its exit status or "timeout". Not in a $(...) subshell: only this shell can
# wait for its children.
REAPED=""
reap() {
  local name=$1 limit=$2 i=0
  while alive "$name" && ((i < limit * 10)); do sleep 0.1; i=$((i + 1)); done
  if alive "$name"; then
    kill -9 "${PID[$name]}" 2>/dev/null
    { wait "${PID[$name]}"; } 2>/dev/null
    REAPED=timeout
    return
  fi
  { wait "${PID[$name]}"; } 2>/dev/null
  REAPED=$?
}

cleanup() {
  local name
  for name in "${NAMES[@]}"; do
    [[ -n "${PID[$name]:-}" ]] && kill -9 "${PID[$name]}" 2>/dev/null
  done
  wait 2>/dev/null
  rm -rf "$ROOT"
  if ((KEEP)) || ((${#VIOLATIONS[@]})); then
    echo "soak: logs kept in $WORK" >&2
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- kind: spsc_ring
# One ring per producer/consumer pair; records carry (producer, sequence, CRC).
spsc_register() {
  local i
  for ((i = 0; i < PAIRS; i++)); do
    register 1 "producer-$i" "$HELPERS/test_soak_producer" --ring "soak.spsc.$i" --id "$i" \
      --journal "$WORK/producer-$i.journal" --log "$WORK/producer-$i.log" --rate "$RATE" \
      --batch-max "$PRODUCER_BATCH" --capacity 65536 --hold-us "$HOLD_US"
    register 2 "consumer-$i" "$HELPERS/test_soak_consumer" --ring "soak.spsc.$i" --id "$i" \
      --log "$WORK/consumer-$i.log" --batch-max "$CONSUMER_BATCH" --hold-us "$HOLD_US"
  done
}
spsc_progress_logs() {
  local i
  for ((i = 0; i < PAIRS; i++)); do echo "$WORK/producer-$i.log" "$WORK/consumer-$i.log"; done
}
spsc_verify() {
  "$HELPERS/test_soak_verify" --dir "$WORK" --pairs "$PAIRS" --batch-max "$CONSUMER_BATCH" \
    --end-ns "$END_NS"
}
KINDS=(spsc)

# ---------------------------------------------------------------- the sidecar
register 3 sidecar "$BIN/shm-sidecar" --root "$ROOT" --interval "$SIDECAR_INTERVAL" \
  --stuck-after 2000 --listen 127.0.0.1:0
sidecar_port() { grep -o 'listening on 127.0.0.1:[0-9]*' "$WORK/sidecar.out" | tail -1 | cut -d: -f2; }
# GET a path from the sidecar with bash's /dev/tcp (no curl needed).
http_get() {
  local port=$1 path=$2
  exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
  printf 'GET %s HTTP/1.0\r\n\r\n' "$path" >&3
  timeout 5 cat <&3
  exec 3<&-
}

for kind in "${KINDS[@]}"; do "${kind}_register"; done

log "$DURATION s, kill -9 every $KILL_INTERVAL s, $PAIRS producer/consumer pair(s) per kind" \
    "(${KINDS[*]}), seed $SEED"
log "root $ROOT, logs $WORK"
start_proc sidecar
for ((i = 0; i < 100; i++)); do grep -qx ready "$WORK/sidecar.out" 2>/dev/null && break; sleep 0.1; done
grep -qx ready "$WORK/sidecar.out" || { violation "sidecar did not start: $(cat "$WORK/sidecar.out")"; exit 1; }
for name in "${NAMES[@]}"; do [[ $name == sidecar ]] || start_proc "$name"; done

# Everyone makes progress before the first kill.
mapfile -t progress_logs < <(for kind in "${KINDS[@]}"; do "${kind}_progress_logs"; done | tr ' ' '\n')
for ((i = 0; i < 200; i++)); do
  ready=1
  for f in "${progress_logs[@]}"; do grep -q '^F ' "$f" 2>/dev/null || ready=0; done
  ((ready)) && break
  sleep 0.1
done
((ready)) || { violation "not every process made progress within 20 s"; exit 1; }

# ---------------------------------------------------------------- chaos
KILLS=0
start_s=$SECONDS
while ((SECONDS - start_s < DURATION)); do
  sleep "$KILL_INTERVAL"
  for name in "${NAMES[@]}"; do
    if ! alive "$name"; then
      reap "$name" 0
      violation "$name (pid ${PID[$name]}) exited on its own with status $REAPED; see $WORK/$name.out"
      start_proc "$name"
    fi
  done
  victim=${NAMES[RANDOM % ${#NAMES[@]}]}
  kill -9 "${PID[$victim]}" 2>/dev/null
  { wait "${PID[$victim]}"; } 2>/dev/null
  echo "K $victim $(now_ns)" >>"$WORK/events.log"
  KILLS=$((KILLS + 1))
  # Restart after 0-300 ms: sometimes the sidecar reclaims the slot first,
  # sometimes the new process takes the dead one's slot over itself.
  sleep "0.$(printf '%03d' $((RANDOM % 300)))"
  echo "R $victim $(now_ns)" >>"$WORK/events.log"
  start_proc "$victim"
done
END_NS=$(now_ns)
sleep 0.5  # let the last restarted process attach

# The metrics endpoint answers under load and lists every segment.
port=$(sidecar_port)
metrics=$(http_get "$port" /metrics 2>/dev/null || true)
if [[ "$metrics" != *"200 OK"* ]]; then
  violation "GET /metrics on port ${port:-?} failed"
else
  up=$(grep -c '^libshm_segment_up{.*} 1$' <<<"$metrics")
  ((up == PAIRS * ${#KINDS[@]})) || violation "/metrics lists $up segments up, expected $((PAIRS * ${#KINDS[@]}))"
fi

# ---------------------------------------------------------------- clean stop
for phase in 1 2 3; do
  for name in "${NAMES[@]}"; do ((PHASE[$name] == phase)) && kill -TERM "${PID[$name]}" 2>/dev/null; done
  for name in "${NAMES[@]}"; do
    ((PHASE[$name] == phase)) || continue
    reap "$name" 20
    [[ $REAPED == 0 ]] || violation "$name did not stop cleanly (status $REAPED); see $WORK/$name.out"
  done
done

# ---------------------------------------------------------------- verify
for kind in "${KINDS[@]}"; do
  log "verify $kind:"
  "${kind}_verify" || violation "$kind: delivery semantics violated (see above)"
done
deaths=$(grep -c 'event=attacher_dead' "$WORK/sidecar.out")
reclaimed=$(grep -c 'event=attacher_reclaimed' "$WORK/sidecar.out")
replaced=$(grep -c 'event=attacher_replaced' "$WORK/sidecar.out")
sidecar_kills=$(grep -c '^K sidecar ' "$WORK/events.log" 2>/dev/null)
log "  sidecar: $deaths dead attacher(s) seen, $reclaimed reclaimed, $replaced taken over by the" \
    "restarted process first; killed and restarted $sidecar_kills time(s)"
if grep -q 'level=error' "$WORK/sidecar.out"; then
  violation "the sidecar logged errors: $(grep 'level=error' "$WORK/sidecar.out" | head -3)"
fi
if [[ -x "$BIN/shmctl" ]]; then
  if out=$("$BIN/shmctl" --root "$ROOT" verify --all 2>&1); then
    log "  shmctl verify --all: ok"
  else
    violation "shmctl verify --all failed: $out"
  fi
else
  log "  shmctl verify --all: skipped ($BIN/shmctl not built)"
fi

# ---------------------------------------------------------------- cleanup check
# Every segment is ephemeral and every attacher has stopped: one sidecar pass
# with --gc-ephemeral must leave nothing behind.
segments_before=$(find "$ROOT" -maxdepth 1 -type f ! -name '.libshm-sidecar.lock' | wc -l)
if ! gc_out=$("$BIN/shm-sidecar" --root "$ROOT" --once --gc-ephemeral 2>&1); then
  violation "shm-sidecar --once --gc-ephemeral failed: $gc_out"
fi
mapfile -t stale < <(find "$ROOT" -mindepth 1 -maxdepth 1 ! -name '.libshm-sidecar.lock' -printf '%f\n')
((${#stale[@]} == 0)) || violation "stale files left in the root after cleanup: ${stale[*]}"
log "  cleanup: $segments_before segment(s) collected, ${#stale[@]} left"

log "summary: $KILLS kill(s) in $DURATION s"
if ((${#VIOLATIONS[@]})); then
  {
    log "FAIL: ${#VIOLATIONS[@]} violation(s):"
    for v in "${VIOLATIONS[@]}"; do printf '  - %s\n' "$v"; done
  } | tee "$WORK/summary.txt"
  exit 1
fi
log "PASS"
