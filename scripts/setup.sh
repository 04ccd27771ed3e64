#!/usr/bin/env bash
# Installs what libshm needs on Debian 12, by purpose.
#
#   scripts/setup.sh          everything the test command needs (scripts/test.sh,
#                             .ci/run): the demo's packages, the tests', the fuzz lane's
#   scripts/setup.sh --demo   only what scripts/demo.sh builds and runs: the
#                             compiler, the build, the headers of the library, the
#                             examples, shmctl and shm-sidecar (no GoogleTest, no
#                             libnats/nats-server, no clang/llvm)
#   scripts/setup.sh --bench  everything, plus what only the benchmarks use
#                             (scripts/bench.sh passes it)
#   scripts/setup.sh --list [--demo|--bench]
#                             prints the packages of that selection, installs nothing
#   source scripts/setup.sh   defines libshm_setup and runs nothing
#
# Only missing packages are installed, and `apt-get update` runs only when
# something is missing, so a second run is a quick no-op. Not root and
# something missing: prints the exact apt-get command and fails.

# The packages by purpose, one per line with what needs them. Each group adds
# to the ones before it: demo < test (the default) < bench.

# scripts/demo.sh: build the library, the examples, shmctl and shm-sidecar.
LIBSHM_DEMO_APT_PACKAGES=(
  g++                # the compiler (g++ 12; its libgcc-12-dev brings libasan/libtsan/libubsan)
  cmake              # the build (3.25)
  ninja-build        # the build backend
  pkgconf            # finds cpp-httplib (its package ships a .pc file, no CMake config)
  libboost-dev       # Boost.Interprocess, Boost.Atomic (header-only parts)
  libfmt-dev         # fmt
  libcli11-dev       # command lines of shmctl, the sidecar and the examples
  nlohmann-json3-dev # JSON output of shmctl and the sidecar
  libcpp-httplib-dev # cpp-httplib 0.11: the HTTP endpoint of the daemons (daemons/common)
  coreutils          # timeout (every demo step and test run is bounded)
)

# The test command (scripts/test.sh, every lane), scripts/demo_two_hosts.sh.
LIBSHM_TEST_APT_PACKAGES=(
  libgtest-dev       # GoogleTest
  libgmock-dev       # GoogleMock (GTest's CMake config references it)
  libbenchmark-dev   # Google Benchmark (bench/; the normal lane builds it)
  libnats-dev        # the NATS C client with JetStream (3.4): shm-bridge (daemons/bridge)
  nats-server        # NATS server 2.9 with JetStream: the shm-bridge tests start their own
  openssl            # the shm-bridge TLS and --creds tests make their certificates, keys, JWTs
  iproute2           # ip: the shm-bridge test's two network namespaces (when root)
  procps             # ps, sysctl (tests, and the TSan ASLR check in scripts/test.sh)
  util-linux         # taskset (bench pinning), setarch (TSan fallback)
  prometheus         # promtool: the sidecar test checks /metrics with `promtool check metrics`
  lld                # the test command's lanes link with lld (scripts/test.sh: 2.5x less CPU than GNU ld)
  doxygen            # the API reference (target docs) and ctest api_documented: every public declaration documented
  clang-19           # the fuzz lane: libFuzzer needs clang; clang 14 cannot compile libstdc++ 12's std::expected
  libclang-rt-19-dev # libFuzzer and clang's sanitizer runtimes
  llvm-19            # llvm-symbolizer: the fuzz lane's reports name functions and lines
)

# Only for scripts/bench.sh: the tests and the demo never need them.
LIBSHM_BENCH_APT_PACKAGES=(
  iceoryx             # iox-roudi, the daemon of the iceoryx peer (xproc_ring, xproc_topic)
  libiceoryx-posh-dev # iceoryx 2.0 publish/subscribe: a peer of the ring and the topic (bench/peers)
  python3-matplotlib  # scripts/plot_bench.py: the charts of scripts/bench.sh --plot
)

# Everything the test command needs (the default selection).
LIBSHM_APT_PACKAGES=("${LIBSHM_DEMO_APT_PACKAGES[@]}" "${LIBSHM_TEST_APT_PACKAGES[@]}")

# Prints the packages of a selection: "" (the test command's), --demo or --bench.
libshm_wanted_packages() {
  case "${1:-}" in
    --demo) printf '%s\n' "${LIBSHM_DEMO_APT_PACKAGES[@]}" ;;
    --bench) printf '%s\n' "${LIBSHM_APT_PACKAGES[@]}" "${LIBSHM_BENCH_APT_PACKAGES[@]}" ;;
    *) printf '%s\n' "${LIBSHM_APT_PACKAGES[@]}" ;;
  esac
}

# Prints the packages of that selection that are not installed.
libshm_missing_packages() {
  local pkg status
  while IFS= read -r pkg; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
    [[ "$status" == "installed" ]] || printf '%s\n' "$pkg"
  done < <(libshm_wanted_packages "${1:-}")
}

libshm_setup() {
  local mode="" list=0
  while (($#)); do
    case "$1" in
      --demo | --bench)
        [[ -z "$mode" ]] || { echo "setup: give one of --demo and --bench" >&2; return 2; }
        mode=$1 ;;
      --list) list=1 ;;
      *) echo "setup: unknown argument '$1' (--demo, --bench, --list)" >&2; return 2 ;;
    esac
    shift
  done
  if ((list)); then
    libshm_wanted_packages "$mode"
    return 0
  fi
  local what=${mode:+ (${mode#--} selection)}
  if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "setup: dpkg-query not found: this script knows Debian/Ubuntu only." >&2
    echo "setup: install the equivalents of: $(libshm_wanted_packages "$mode" | paste -sd' ' -)" >&2
    return 1
  fi
  local missing
  mapfile -t missing < <(libshm_missing_packages "$mode")
  if ((${#missing[@]} == 0)); then
    echo "setup: all required packages are installed$what"
    return 0
  fi
  echo "setup: missing packages$what: ${missing[*]}"
  if [[ "$(id -u)" != 0 ]]; then
    echo "setup: not root, so not installing. Run as root:" >&2
    echo "  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}" >&2
    return 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q || {
    echo "setup: apt-get update failed" >&2
    return 1
  }
  apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null || {
    echo "setup: apt-get install failed for: ${missing[*]}" >&2
    return 1
  }
  mapfile -t missing < <(libshm_missing_packages "$mode")
  if ((${#missing[@]} != 0)); then
    echo "setup: still missing after install: ${missing[*]}" >&2
    return 1
  fi
  echo "setup: installed the missing packages"
}

# Run directly (not sourced): do the setup.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  libshm_setup "$@"
fi
