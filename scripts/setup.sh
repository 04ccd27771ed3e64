#!/usr/bin/env bash
# Installs what libshm needs to build, test and run its demo on Debian 12.
#
#   scripts/setup.sh          check, and install what is missing (as root)
#   scripts/setup.sh --bench  the same, plus what only the benchmarks use
#                             (scripts/bench.sh passes it)
#   source scripts/setup.sh   defines libshm_setup and runs nothing
#
# Only missing packages are installed, and `apt-get update` runs only when
# something is missing, so a second run is a quick no-op. Not root and
# something missing: prints the exact apt-get command and fails.

# The packages, one per line with what needs them.
LIBSHM_APT_PACKAGES=(
  g++                # the compiler (g++ 12; its libgcc-12-dev brings libasan/libtsan/libubsan)
  cmake              # the build (3.25)
  ninja-build        # the build backend
  libboost-dev       # Boost.Interprocess, Boost.Atomic (header-only parts)
  libfmt-dev         # fmt
  libgtest-dev       # GoogleTest
  libgmock-dev       # GoogleMock (GTest's CMake config references it)
  libbenchmark-dev   # Google Benchmark (bench/)
  nlohmann-json3-dev # JSON output of shmctl and the sidecar
  libcli11-dev       # command lines of shmctl, the sidecar and the examples
  libcpp-httplib-dev # cpp-httplib 0.11: the HTTP endpoint of the daemons (daemons/common)
  libnats-dev        # the NATS C client with JetStream (3.4): shm-bridge (daemons/bridge)
  nats-server        # NATS server 2.9 with JetStream: the shm-bridge tests start their own
  openssl            # the shm-bridge TLS and --creds tests make their certificates, keys, JWTs
  pkgconf            # finds cpp-httplib (its package ships a .pc file, no CMake config)
  iproute2           # ip: the shm-bridge test's two network namespaces (when root)
  procps             # ps, sysctl (tests, and the TSan ASLR check in scripts/test.sh)
  util-linux         # taskset (bench pinning), setarch (TSan fallback)
  coreutils          # timeout (every test run is bounded)
  prometheus         # promtool: the sidecar test checks /metrics with `promtool check metrics`
  doxygen            # the API reference (target docs) and ctest api_documented: every public declaration documented
  clang-19           # the fuzz lane: libFuzzer needs clang; clang 14 cannot compile libstdc++ 12's std::expected
  libclang-rt-19-dev # libFuzzer and clang's sanitizer runtimes
  llvm-19            # llvm-symbolizer: the fuzz lane's reports name functions and lines
)

# Only for scripts/bench.sh: the tests and the demo never need them.
LIBSHM_BENCH_APT_PACKAGES=(
  iceoryx             # iox-roudi, the daemon of the iceoryx peer in xproc_ring
  libiceoryx-posh-dev # iceoryx 2.0 publish/subscribe: a peer of the ring (bench/peers)
  python3-matplotlib  # scripts/plot_bench.py: the charts of scripts/bench.sh --plot
)

# Prints the packages of LIBSHM_APT_PACKAGES (and, with --bench,
# LIBSHM_BENCH_APT_PACKAGES) that are not installed.
libshm_missing_packages() {
  local pkg status
  local wanted=("${LIBSHM_APT_PACKAGES[@]}")
  [[ "${1:-}" == --bench ]] && wanted+=("${LIBSHM_BENCH_APT_PACKAGES[@]}")
  for pkg in "${wanted[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
    [[ "$status" == "installed" ]] || printf '%s\n' "$pkg"
  done
}

libshm_setup() {
  local mode=${1:-}
  if [[ -n "$mode" && "$mode" != --bench ]]; then
    echo "setup: unknown argument '$mode' (only --bench)" >&2
    return 2
  fi
  if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "setup: dpkg-query not found: this script knows Debian/Ubuntu only." >&2
    echo "setup: install the equivalents of: ${LIBSHM_APT_PACKAGES[*]}" >&2
    return 1
  fi
  local missing
  mapfile -t missing < <(libshm_missing_packages "$mode")
  if ((${#missing[@]} == 0)); then
    echo "setup: all required packages are installed${mode:+ (with those of $mode)}"
    return 0
  fi
  echo "setup: missing packages: ${missing[*]}"
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
