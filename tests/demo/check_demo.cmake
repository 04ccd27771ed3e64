# Run by the ctest entry `demo` (tests/demo.cmake) as `cmake -P`: runs
# scripts/demo.sh on the build's programs in a private root and checks that it
# exits 0 and that its output shows every step: the section headers, what each
# step is there to show, and the summary line.
foreach(var SHM_DEMO_SCRIPT SHM_BIN_DIR SHM_DEMO_COUNT)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "check_demo.cmake: ${var} is not set")
  endif()
endforeach()

string(RANDOM LENGTH 8 suffix)
set(root /dev/shm/libshm-demo-test-${suffix})
# A port of its own range, so two builds running the demo test do not probe
# the same ports (the script moves on from a port in use all the same).
string(RANDOM LENGTH 4 ALPHABET 0123456789 port_offset)
math(EXPR port "20000 + ${port_offset}")
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env LIBSHM_DEMO_ROOT=${root} LIBSHM_DEMO_PORT=${port}
    bash ${SHM_DEMO_SCRIPT} --bin-dir ${SHM_BIN_DIR} --count ${SHM_DEMO_COUNT}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT 170)
file(REMOVE_RECURSE ${root})
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "demo test: scripts/demo.sh exited ${rc}")
endif()

# What the output must show, step by step (regular expressions).
set(expected
  "==== sidecar: shm-sidecar"
  "==== ring: "
  "ring: all ${SHM_DEMO_COUNT} messages arrived in order with valid checksums"
  "==== relay: relay_ticker"
  "[0-9]+ writes, [0-9]+ conflated, [0-9]+ drained"
  "symbols whose latest price the reader missed: 0"
  "==== spill: relay_log --spill"
  "reader paused: [1-9][0-9]* cold pages"
  "writer blocked 0 times"
  "==== egress: egress_transport"
  "killed transport [0-9]+ \\(SIGKILL\\) at [0-9]+ of 20000 acknowledged"
  "complete: 20000 payloads, 20000 acknowledged"
  "receiver: 20000 of 20000 payloads delivered, each once and in order, 0 corrupt"
  "==== metrics: http://127.0.0.1:[0-9]+/metrics"
  "libshm_segment_info\\{segment=\"demo-ring\""
  "==== shmctl --root [^ ]+ ls"
  # The steps' segments stay (--keep) and shmctl lists each with its kind.
  "\ndemo-ring +spsc_ring "
  "\nticker +relay "
  "\nlog +relay "
  "\negress-demo +egress "
  "==== shmctl --root [^ ]+ inspect demo-ring"
  "==== summary"
  "demo: all 7 steps passed")
foreach(pattern ${expected})
  if(NOT out MATCHES "${pattern}")
    message(FATAL_ERROR "demo test: the output does not show: ${pattern}")
  endif()
endforeach()
# The summary lists every step as passed.
foreach(step sidecar ring relay spill egress metrics shmctl)
  if(NOT out MATCHES "\n  ${step} +PASS ")
    message(FATAL_ERROR "demo test: the summary does not list the step ${step} as PASS")
  endif()
endforeach()
message(STATUS "demo test: every step passed and showed what it is for")
