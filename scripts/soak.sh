#!/usr/bin/env bash
# Soak v1: producer and consumer processes over every kind the soak knows, the
# sidecar watching them, and a random kill -9 every --kill-interval seconds
# followed by a restart of the victim. At the end: stop everything cleanly,
# verify, clean up, print a summary; exit 1 on any violation.
#
#   scripts/soak.sh [--build-dir DIR] [--duration S] [--kill-interval S]
#                   [--kinds LIST] [--seed N] [--keep]
#                   [--pairs N] [--rate R]                          (spsc)
#                   [--fanout-producers N] [--fanout-consumers M]
#                   [--fanout-rate R]                               (fanout)
#                   [--ledger-workers N] [--ledger-rate R]          (ledger)
#                   [--relay-writers N] [--relay-rate R]            (relay)
#                   [--egress-senders N] [--egress-rate R]          (egress)
#                   [--topic-subscribers N] [--topic-rate R]        (topic)
#
#   --build-dir DIR    the build to test (default: build/ next to scripts/)
#   --duration S       seconds of chaos (default 30)
#   --kill-interval S  seconds between kills, fractions allowed (default 1); the
#                      victim is restarted 0-300 ms after its kill. Every
#                      process, the sidecar included, is a candidate.
#   --kinds LIST       comma-separated, default spsc,fanout,ledger,relay,egress,topic:
#     spsc    SpscRing: --pairs producer/consumer pairs (default 2), one ring
#             each (processes producer-I, consumer-I); --rate records/s per
#             producer (default 20000);
#     fanout  PriorityFanout of 4 MpmcRings + bitmap (alias: mpmc): N producers
#             and M consumers sharing it (default 2 and 2; processes
#             fanout-producer-I, fanout-consumer-I); --fanout-rate items/s per
#             producer (default 4000);
#     ledger  Ledger: N workers (default 3; ledger-worker-I) reserving,
#             committing, replacing and releasing at random on pools of their
#             own and admitting on shared token buckets, --ledger-rate
#             operations/s each (default 1500); and a checker sampling every
#             account (ledger-checker).
#     relay   RelayCell, raw_fifo with the Spill overflow and small pages
#             (tests/soak/soak_relay.hpp): N writers (default 2;
#             relay-writer-I) at --relay-rate ops/s each (default 1000) and one
#             reader (relay-reader) that stops reading for a few hundred ms
#             every second or two, so the head spills pages into a spill
#             directory in the logs folder, which the reader drains back.
#     egress  Egress (reliable send state, tests/soak/soak_egress.hpp): N senders
#             (default 2; egress-sender-I) enqueueing CRC-carrying messages at
#             --egress-rate messages/s each (default 1000) and one transport
#             (egress-transport) that claims them, delivers them into its log
#             and acknowledges cumulatively, late, partly and sometimes out of
#             order, fails some sends (a send error, or an ack that never came)
#             so records park and are retried, times a full window out when a
#             gap blocks it, and stops claiming for a few hundred ms now and
#             then so the pool fills and the senders wait for space. A
#             restarted transport reconnects (generation + 1) and replays
#             what its killed predecessor had in flight.
#     topic   Topic (zero-copy publish-subscribe, tests/soak/soak_topic.hpp): one
#             publisher (topic-publisher) at --topic-rate samples/s (default
#             2000) and N subscribers (default 3; topic-subscriber-I), in turn
#             Block and fast, Block and slow (stops receiving for about 100 ms
#             now and then: the publisher waits), DropOldest and slow (about
#             300 ms: it misses samples); each keeps a few samples held, so a
#             kill leaves chunks for the next attach or the sidecar to return.
#   --seed N           seeds the choice of victims and restart delays
#   --keep             keep the logs (they are always kept on a failure)
#
# What is verified (details in the verifiers, tests/soak/soak_*verify.cpp):
#   spsc:
#   - nothing lost: every record a producer published reaches the consumer log;
#   - nothing duplicated, except at-least-once redelivery of the batch a killed
#     consumer had in hand (peeked and logged, maybe not released) - a new
#     consumer incarnation may start no earlier than that batch's first record;
#   - exactly-once publication across producer kills (a partial batch is never
#     visible; a restarted producer continues at the first unpublished number);
#   - nothing corrupt: every record passes its CRC;
#   fanout (consumers drain at-least-once: take, log, release):
#   - nothing lost: every item a producer submitted reaches a consumer log,
#     whatever was killed (the item a producer was submitting when killed is
#     published once or not at all; no ring counts a lost pop);
#   - nothing duplicated, except an item a killed consumer had in hand (taken
#     and logged, maybe not released; its hand file names it): delivered at
#     most once more per such kill, counted and reported apart as redelivered;
#   - each producer's items of one priority reach a consumer in submission
#     order, except an item taken again after its taker was killed (an orphan
#     comes back before newer items of its ring);
#   - nothing corrupt: every item passes its body and routing checks;
#   ledger:
#   - never over a limit: the checker samples every account while the workers
#     run and get killed, and recomputes the counters from the ticket table;
#   - every worker's pools always match the tickets it holds;
#   - no leaked charge: after the workers stop and the sidecar ran its cycles
#     (reclaiming what killed workers held), every account is at 0 used and 0
#     reserved, no ticket is live, no pool is open;
#   relay (at-least-once replay, deduplicated by first_seq):
#   - nothing lost: every op a writer saw acknowledged is delivered; the op a
#     writer was writing when killed lands once or not at all;
#   - an entry is delivered again only as a replay (same first_seq and op,
#     flagged redelivered) of an entry a killed reader had taken and not
#     committed, once more per such kill (counted apart); every entry
#     delivered for the first time has a larger first_seq than all before it,
#     so deduplicating by first_seq applies each op exactly once; each writer's
#     ops come in its order; nothing corrupt;
#   - the relay did spill (entries came back from cold pages), every page
#     sealed was acknowledged, and counted once (pages_acked + pages_expired
#     = pages_sealed + pages_rebuilt at the clean stop, whatever the kills
#     hit), and no page file is left in the spill directory;
#   egress (at least once, deduplicated by sequence):
#   - nothing lost: every message a sender saw enqueued is delivered; the one
#     a sender was enqueueing when killed lands once or not at all; every
#     sequence the egress assigned is delivered;
#   - a sequence is delivered again only when the transport that delivered it
#     last was killed (replayed under the next generation) or fail() was called
#     on it since (retried), counted apart; its attempt grows each time; a
#     sequence always carries the same message, a message only one sequence;
#   - an acknowledgement is final (nothing at or below it delivered again;
#     every ack advanced, or unchanged when late); the generation fence: each
#     transport incarnation has a larger generation, delivers only envelopes of
#     its own, and sees a claim and an ack of the previous one refused;
#     exact window (in the transport); nothing corrupt (CRC);
#   - nothing left in the pool after the final drain (no pending, in-flight,
#     parked or terminal record; the watermark at next_sequence - 1);
#   topic (every sample to every subscriber, in place):
#   - nothing corrupt (every byte of every sample checked); each subscriber
#     receives in increasing (publisher incarnation, seq); one (incarnation,
#     seq) is the same sample for every subscriber, and the one the publisher
#     logged (or, unlogged, the one it was publishing when killed);
#   - a Block subscriber loses nothing within a publisher incarnation; a
#     DropOldest one skips no more than its missed() count grew; a subscriber
#     attached before the last publish ends with it;
#   - the chunk accounting is exact after every kill (shmctl verify below).
#   every kind:
#   - `shmctl verify --all` (when shmctl is built) finds no violated invariant;
#   - every process stops cleanly at the end, the sidecar logs no error and
#     exits 0, every killed process recovers (time from restart to its first
#     progress; test_soak_recovery);
#   - no stale segment: after a `shm-sidecar --once --gc-ephemeral` pass the
#     root holds nothing but the sidecar's lock file.
# Summary: messages delivered, ledger operations, kills by process type,
# recoveries, max recovery time; fanout and egress redeliveries are counted apart.
#
# Adding a kind = one more block like the spsc_* functions below (register its
# processes, list its progress logs and segment count, verify its logs) and
# its name in ALL_KINDS.
set -u -o pipefail

usage() {
  sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
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
FANOUT_PRODUCERS=2
FANOUT_CONSUMERS=2
FANOUT_RATE=4000      # items per second per fanout producer (a ceiling)
FANOUT_PRIORITIES=4
FANOUT_CAPACITY=1024  # cells per priority ring
FANOUT_HOLD_US=1000   # consumers pause up to this long (every 16th item) between take and
                      # log or between log and release
LEDGER_WORKERS=3
LEDGER_RATE=1500      # operations per second per ledger worker (a ceiling)
LEDGER_CHECK_US=2000  # the checker's sampling interval
RELAY_WRITERS=2
RELAY_RATE=1000       # ops per second per relay writer (a ceiling)
RELAY_PAUSE_MS=300    # the relay reader stops reading for 150-450 ms ...
RELAY_PAUSE_EVERY_MS=1500  # ... every 0.75-2.25 s: the head spills meanwhile
EGRESS_SENDERS=2
EGRESS_RATE=1000      # messages per second per egress sender (a ceiling)
EGRESS_PAUSE_MS=200   # the egress transport stops claiming for 100-300 ms ...
EGRESS_PAUSE_EVERY_MS=1500  # ... every 0.75-2.25 s: the pool fills meanwhile
EGRESS_HOLD_US=1000   # the transport pauses up to this long between a delivery and its ack
TOPIC_SUBSCRIBERS=3
TOPIC_RATE=2000       # samples per second from the topic publisher (a ceiling)
SIDECAR_INTERVAL=50   # ms
SEED=$$
KEEP=0
ALL_KINDS=(spsc fanout ledger relay egress topic)
KINDS_ARG=$(IFS=,; echo "${ALL_KINDS[*]}")
while (($#)); do
  case "$1" in
    --build-dir) BUILD_DIR=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --kill-interval) KILL_INTERVAL=$2; shift 2 ;;
    --kinds) KINDS_ARG=$2; shift 2 ;;
    --pairs) PAIRS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --fanout-producers) FANOUT_PRODUCERS=$2; shift 2 ;;
    --fanout-consumers) FANOUT_CONSUMERS=$2; shift 2 ;;
    --fanout-rate) FANOUT_RATE=$2; shift 2 ;;
    --ledger-workers) LEDGER_WORKERS=$2; shift 2 ;;
    --ledger-rate) LEDGER_RATE=$2; shift 2 ;;
    --relay-writers) RELAY_WRITERS=$2; shift 2 ;;
    --relay-rate) RELAY_RATE=$2; shift 2 ;;
    --egress-senders) EGRESS_SENDERS=$2; shift 2 ;;
    --egress-rate) EGRESS_RATE=$2; shift 2 ;;
    --topic-subscribers) TOPIC_SUBSCRIBERS=$2; shift 2 ;;
    --topic-rate) TOPIC_RATE=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) usage ;;
    *) echo "soak: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
bad_usage() { echo "soak: $* (see --help)" >&2; exit 2; }
for v in DURATION PAIRS RATE FANOUT_PRODUCERS FANOUT_CONSUMERS FANOUT_RATE LEDGER_WORKERS \
         LEDGER_RATE RELAY_WRITERS RELAY_RATE EGRESS_SENDERS EGRESS_RATE TOPIC_SUBSCRIBERS \
         TOPIC_RATE SEED; do
  [[ ${!v} =~ ^[0-9]+$ ]] || bad_usage "--$(tr '_A-Z' '-a-z' <<<"$v") must be a whole number, not '${!v}'"
done
((TOPIC_SUBSCRIBERS >= 1 && TOPIC_SUBSCRIBERS <= 8)) ||
  bad_usage "--topic-subscribers must be 1 to 8 (the topic's pool is sized for 8)"
[[ $KILL_INTERVAL =~ ^[0-9]*\.?[0-9]+$ ]] || bad_usage "--kill-interval must be a number of seconds"
KINDS=()
IFS=, read -r -a kinds_wanted <<<"$KINDS_ARG"
for k in "${kinds_wanted[@]}"; do
  [[ $k == mpmc ]] && k=fanout
  [[ " ${ALL_KINDS[*]} " == *" $k "* ]] || bad_usage "unknown kind '$k' (kinds: ${ALL_KINDS[*]})"
  [[ " ${KINDS[*]} " == *" $k "* ]] || KINDS+=("$k")
done
((${#KINDS[@]})) || bad_usage "--kinds is empty"
[[ -n "$BUILD_DIR" ]] || BUILD_DIR="$script_dir/../build"
BIN="$BUILD_DIR/bin"
HELPERS="$BUILD_DIR/test-helpers"
declare -A KIND_HELPERS=(
  [spsc]="test_soak_producer test_soak_consumer test_soak_verify"
  [fanout]="test_soak_fanout_producer test_soak_fanout_consumer test_soak_fanout_verify"
  [ledger]="test_soak_ledger_worker test_soak_ledger_checker test_soak_ledger_verify"
  [relay]="test_soak_relay_writer test_soak_relay_reader test_soak_relay_verify"
  [egress]="test_soak_egress_sender test_soak_egress_transport test_soak_egress_verify"
  [topic]="test_soak_topic_publisher test_soak_topic_subscriber test_soak_topic_verify"
)
needed=("$BIN/shm-sidecar" "$HELPERS/test_soak_recovery")
for kind in "${KINDS[@]}"; do
  for h in ${KIND_HELPERS[$kind]}; do needed+=("$HELPERS/$h"); done
done
for exe in "${needed[@]}"; do
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
spsc_segments() { echo "$PAIRS"; }
spsc_verify() {
  "$HELPERS/test_soak_verify" --dir "$WORK" --pairs "$PAIRS" --batch-max "$CONSUMER_BATCH"
}

# ---------------------------------------------------------------- kind: fanout (MpmcRing)
# One PriorityFanout (FANOUT_PRIORITIES MpmcRings + the bitmap) shared by every
# fanout producer and consumer; items carry (producer, sequence, priority).
FANOUT=soak.fanout
fanout_register() {
  local i shape=(--priorities "$FANOUT_PRIORITIES" --capacity "$FANOUT_CAPACITY")
  for ((i = 0; i < FANOUT_PRODUCERS; i++)); do
    register 1 "fanout-producer-$i" "$HELPERS/test_soak_fanout_producer" --fanout "$FANOUT" \
      --id "$i" --journal "$WORK/fanout-producer-$i.journal" --log "$WORK/fanout-producer-$i.log" \
      --rate "$FANOUT_RATE" "${shape[@]}"
  done
  for ((i = 0; i < FANOUT_CONSUMERS; i++)); do
    register 2 "fanout-consumer-$i" "$HELPERS/test_soak_fanout_consumer" --fanout "$FANOUT" \
      --id "$i" --log "$WORK/fanout-consumer-$i.log" --hand "$WORK/fanout-consumer-$i.hand" \
      --hold-us "$FANOUT_HOLD_US" "${shape[@]}"
  done
}
fanout_progress_logs() {
  local i
  for ((i = 0; i < FANOUT_PRODUCERS; i++)); do echo "$WORK/fanout-producer-$i.log"; done
  for ((i = 0; i < FANOUT_CONSUMERS; i++)); do echo "$WORK/fanout-consumer-$i.log"; done
}
fanout_segments() { echo $((FANOUT_PRIORITIES + 1)); }
fanout_verify() {
  "$HELPERS/test_soak_fanout_verify" --dir "$WORK" --producers "$FANOUT_PRODUCERS" \
    --consumers "$FANOUT_CONSUMERS"
}

# ---------------------------------------------------------------- kind: ledger
# One Ledger shared by every worker; the checker samples it read-only.
LEDGER=soak.ledger
ledger_register() {
  local i
  for ((i = 0; i < LEDGER_WORKERS; i++)); do
    register 1 "ledger-worker-$i" "$HELPERS/test_soak_ledger_worker" --ledger "$LEDGER" \
      --id "$i" --log "$WORK/ledger-worker-$i.log" --rate "$LEDGER_RATE"
  done
  register 2 ledger-checker "$HELPERS/test_soak_ledger_checker" --ledger "$LEDGER" \
    --log "$WORK/ledger-checker.log" --interval-us "$LEDGER_CHECK_US"
}
ledger_progress_logs() {
  local i
  for ((i = 0; i < LEDGER_WORKERS; i++)); do echo "$WORK/ledger-worker-$i.log"; done
  echo "$WORK/ledger-checker.log"
}
ledger_segments() { echo 1; }
ledger_verify() {
  "$HELPERS/test_soak_ledger_verify" --ledger "$LEDGER" --dir "$WORK" --workers "$LEDGER_WORKERS" \
    --sidecar-log "$WORK/sidecar.out"
}

# ---------------------------------------------------------------- kind: relay (Spill)
# One raw_fifo relay shared by every relay writer and the reader; its spill
# pages go to $WORK/spill/ (durable storage, never /dev/shm).
RELAY=soak.relay
relay_spill_dir() { echo "$WORK/spill/$RELAY"; }
relay_register() {
  local i spill=(--relay "$RELAY" --spill-dir "$(relay_spill_dir)")
  for ((i = 0; i < RELAY_WRITERS; i++)); do
    register 1 "relay-writer-$i" "$HELPERS/test_soak_relay_writer" "${spill[@]}" --id "$i" \
      --journal "$WORK/relay-writer-$i.journal" --log "$WORK/relay-writer-$i.log" \
      --rate "$RELAY_RATE"
  done
  register 2 relay-reader "$HELPERS/test_soak_relay_reader" "${spill[@]}" \
    --log "$WORK/relay-reader.log" --pause-ms "$RELAY_PAUSE_MS" \
    --pause-every-ms "$RELAY_PAUSE_EVERY_MS"
}
relay_progress_logs() {
  local i
  for ((i = 0; i < RELAY_WRITERS; i++)); do echo "$WORK/relay-writer-$i.log"; done
  echo "$WORK/relay-reader.log"
}
relay_segments() { echo 1; }
relay_verify() {
  "$HELPERS/test_soak_relay_verify" --dir "$WORK" --writers "$RELAY_WRITERS" || return 1
  # Every sealed page was acknowledged, so its file is gone.
  local pages
  pages=$(find "$(relay_spill_dir)" -name 'page-*' 2>/dev/null | wc -l)
  echo "  spill directory: $pages page file(s) left"
  ((pages == 0))
}

# ---------------------------------------------------------------- kind: egress
# One Egress shared by every egress sender and the transport.
EGRESS=soak.egress
egress_register() {
  local i
  for ((i = 0; i < EGRESS_SENDERS; i++)); do
    register 1 "egress-sender-$i" "$HELPERS/test_soak_egress_sender" --egress "$EGRESS" --id "$i" \
      --journal "$WORK/egress-sender-$i.journal" --log "$WORK/egress-sender-$i.log" \
      --rate "$EGRESS_RATE"
  done
  register 2 egress-transport "$HELPERS/test_soak_egress_transport" --egress "$EGRESS" \
    --log "$WORK/egress-transport.log" --pause-ms "$EGRESS_PAUSE_MS" \
    --pause-every-ms "$EGRESS_PAUSE_EVERY_MS" --hold-us "$EGRESS_HOLD_US"
}
egress_progress_logs() {
  local i
  for ((i = 0; i < EGRESS_SENDERS; i++)); do echo "$WORK/egress-sender-$i.log"; done
  echo "$WORK/egress-transport.log"
}
egress_segments() { echo 1; }
egress_verify() {
  "$HELPERS/test_soak_egress_verify" --dir "$WORK" --senders "$EGRESS_SENDERS"
}

# ---------------------------------------------------------------- kind: topic
# One Topic: the publisher and every subscriber. Subscriber I is Block and
# fast (I % 3 == 0), Block and slow (1) or DropOldest and slow (2).
TOPIC=soak.topic
topic_register() {
  local i overflow pause
  register 1 topic-publisher "$HELPERS/test_soak_topic_publisher" --topic "$TOPIC" \
    --log "$WORK/topic-publisher.log" --rate "$TOPIC_RATE"
  for ((i = 0; i < TOPIC_SUBSCRIBERS; i++)); do
    case $((i % 3)) in
      0) overflow=block pause=0 ;;
      1) overflow=block pause=100 ;;
      2) overflow=drop_oldest pause=300 ;;
    esac
    register 2 "topic-subscriber-$i" "$HELPERS/test_soak_topic_subscriber" --topic "$TOPIC" \
      --id "$i" --overflow "$overflow" --log "$WORK/topic-subscriber-$i.log" --hold 4 \
      --pause-ms "$pause" --pause-every-ms 1500
  done
}
topic_progress_logs() {
  local i
  echo "$WORK/topic-publisher.log"
  for ((i = 0; i < TOPIC_SUBSCRIBERS; i++)); do echo "$WORK/topic-subscriber-$i.log"; done
}
topic_segments() { echo 1; }
topic_verify() {
  "$HELPERS/test_soak_topic_verify" --dir "$WORK" --subscribers "$TOPIC_SUBSCRIBERS"
}

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

shape=()
for kind in "${KINDS[@]}"; do
  case $kind in
    spsc) shape+=("spsc: $PAIRS producer/consumer pair(s)") ;;
    fanout) shape+=("fanout: $FANOUT_PRODUCERS producer(s), $FANOUT_CONSUMERS consumer(s)") ;;
    ledger) shape+=("ledger: $LEDGER_WORKERS worker(s) + checker") ;;
    relay) shape+=("relay (spill): $RELAY_WRITERS writer(s) + reader") ;;
    egress) shape+=("egress: $EGRESS_SENDERS sender(s) + transport") ;;
    topic) shape+=("topic: publisher + $TOPIC_SUBSCRIBERS subscriber(s)") ;;
  esac
done
log "$DURATION s, kill -9 every $KILL_INTERVAL s over ${#NAMES[@]} processes (sidecar included)," \
    "seed $SEED"
shape_text=$(IFS=';'; echo "${shape[*]}")
log "${shape_text//;/; }"
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
SIDECAR_LINES=0  # lines of sidecar.out before the sidecar's last start
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
  [[ $victim == sidecar ]] && SIDECAR_LINES=$(wc -l <"$WORK/sidecar.out")
  LAST_VICTIM=$victim
  LAST_VICTIM_LINES=-1
  [[ -f "$WORK/$victim.log" ]] && LAST_VICTIM_LINES=$(wc -l <"$WORK/$victim.log")
  start_proc "$victim"
done
END_NS=$(now_ns)
# The last restarted process must be past its start before the clean stop:
# its log has grown since the restart, so its SIGTERM handler is installed
# (it is, before the log opens). A SIGTERM before that meets the default
# action (status 143), and under load a start can outlast any fixed pause.
if [[ -n "${LAST_VICTIM:-}" ]] && ((LAST_VICTIM_LINES >= 0)); then
  for ((i = 0; i < 200; i++)); do
    (($(wc -l <"$WORK/$LAST_VICTIM.log") > LAST_VICTIM_LINES)) && break
    sleep 0.05
  done
fi
sleep 0.5  # let the last restarted process attach
# A sidecar restarted by the chaos must be listening again before /metrics is
# asked: "ready" after its last start (slow under sanitizers and load).
for ((i = 0; i < 100; i++)); do
  tail -n "+$((SIDECAR_LINES + 1))" "$WORK/sidecar.out" | grep -qx ready && break
  sleep 0.1
done

# The metrics endpoint answers under load and lists every segment.
port=$(sidecar_port)
metrics=$(http_get "$port" /metrics 2>/dev/null || true)
if [[ "$metrics" != *"200 OK"* ]]; then
  violation "GET /metrics on port ${port:-?} failed"
else
  up=$(grep -c '^libshm_segment_up{.*} 1$' <<<"$metrics")
  expected=0
  for kind in "${KINDS[@]}"; do expected=$((expected + $("${kind}_segments"))); done
  ((up == expected)) || violation "/metrics lists $up segments up, expected $expected"
fi

# The sidecar's duty-cycle count, from /metrics (empty when it does not answer).
sidecar_cycles() {
  http_get "$(sidecar_port)" /metrics 2>/dev/null | awk '$1 == "libshm_sidecar_cycles_total" {print $2}'
}

# ---------------------------------------------------------------- clean stop
# Producers (and ledger workers) first, then consumers (which drain what is
# left), then - after the sidecar has run two more cycles over the stopped
# processes, reclaiming whatever a process killed at the very end still held -
# the sidecar.
for phase in 1 2 3; do
  if ((phase == 3)); then
    c0=$(sidecar_cycles)
    for ((i = 0; i < 50; i++)); do
      c=$(sidecar_cycles)
      [[ -n "$c0" && -n "$c" ]] && ((c >= c0 + 2)) && break
      sleep 0.1
    done
    if ! [[ -n "$c0" && -n "$c" ]] || ((c < c0 + 2)); then
      violation "the sidecar did not run two duty cycles after the clean stop (cycles ${c0:-?} -> ${c:-?})"
    fi
  fi
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
  "${kind}_verify" | tee -a "$WORK/verify.txt" || violation "$kind: semantics violated (see above)"
done
log "kills and recovery:"
"$HELPERS/test_soak_recovery" --dir "$WORK" --end-ns "$END_NS" | tee -a "$WORK/verify.txt" ||
  violation "a killed process did not recover (see above)"
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

# One line: the numbers the verifiers printed above.
messages=$(grep -o 'messages: [0-9]* delivered' "$WORK/verify.txt" | awk '{n += $2} END {print n + 0}')
ledger_ops=$(grep -o 'operations: [0-9]*' "$WORK/verify.txt" | awk '{print $2}')
redelivered=$(grep -o 'redelivered after consumer kills: [0-9]*' "$WORK/verify.txt" |
  awk '{print $5 + 0 " fanout item(s) redelivered (in hand at a consumer kill)"}')
# "messages: N delivered, L lost, D duplicated (K redelivered after a transport kill, T retried after a fail), C corrupt"
egress_line=$(grep -o 'messages: [0-9]* delivered, [0-9]* lost, [0-9]* duplicated (.*transport kill.*' \
  "$WORK/verify.txt" |
  awk '{sub(/\(/, "", $8); print "egress " $2 " delivered, " $4 " lost, " $6 " duplicated (" $8 \
              " after transport kills, " $14 " retried after fails), " $19 " corrupt"}')
recoveries=$(grep -o 'recoveries: [0-9]* of [0-9]*' "$WORK/verify.txt" | cut -d' ' -f2-)
max_recovery=$(grep -o 'first progress): max [0-9.]* ms' "$WORK/verify.txt" | awk '{print $4}')
parts=()
[[ " ${KINDS[*]} " == *" spsc "* || " ${KINDS[*]} " == *" fanout "* ||
   " ${KINDS[*]} " == *" relay "* || " ${KINDS[*]} " == *" egress "* ||
   " ${KINDS[*]} " == *" topic "* ]] &&
  parts+=("$messages messages delivered")
[[ -n "$ledger_ops" ]] && parts+=("$ledger_ops ledger operations")
[[ -n "$redelivered" ]] && parts+=("$redelivered")
[[ -n "$egress_line" ]] && parts+=("$egress_line")
summary="${KINDS[*]}: $(IFS='|'; echo "${parts[*]}")"
summary=${summary//|/, }
log "summary: $summary; $KILLS kill(s) in $DURATION s, ${recoveries:-?} recovered," \
    "max recovery ${max_recovery:-?} ms"
if ((${#VIOLATIONS[@]})); then
  {
    log "FAIL: ${#VIOLATIONS[@]} violation(s):"
    for v in "${VIOLATIONS[@]}"; do printf '  - %s\n' "$v"; done
  } | tee "$WORK/summary.txt"
  exit 1
fi
log "PASS"
