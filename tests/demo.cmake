# scripts/demo.sh, the README's main command, on this build's programs
# (--bin-dir: no setup, no build), in a private root: every step (sidecar,
# ring, keyed relay with conflation, spill, egress with its transport killed
# -9, /metrics, shmctl ls/inspect) must pass and show what it is there to
# show; tests/demo/check_demo.cmake lists what the output must contain. Normal
# lane only, as demo_two_hosts: the sanitizer lanes run the same programs in
# their own tests.
if(TARGET ring_producer AND TARGET ring_consumer AND TARGET relay_ticker AND TARGET relay_log
   AND TARGET egress_transport AND TARGET shmctl AND TARGET shm-sidecar
   AND LIBSHM_SANITIZE STREQUAL "")
  add_test(NAME demo
           COMMAND ${CMAKE_COMMAND} -DSHM_DEMO_SCRIPT=${PROJECT_SOURCE_DIR}/scripts/demo.sh
                   -DSHM_BIN_DIR=${CMAKE_BINARY_DIR}/bin -DSHM_DEMO_COUNT=20000
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/demo/check_demo.cmake)
  set_tests_properties(demo PROPERTIES LABELS multiprocess TIMEOUT 180)
endif()
