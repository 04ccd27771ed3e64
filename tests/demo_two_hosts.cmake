# scripts/demo_two_hosts.sh on this build's programs: a real nats-server, two
# roots, a ring on each, both bridges, the export bridge killed -9 and
# restarted halfway; exits 0 when ring_consumer on host B verified every
# message once, in order, intact (sequence + CRC32C). Normal lane only: the
# sanitizer lanes run the bridge's own tests (tests/integration/bridge); this
# entry checks the user-facing script and its programs as a user runs them.
if(TARGET shm-bridge AND TARGET ring_producer AND TARGET ring_consumer AND TARGET shmctl
   AND NOT LIBSHM_SANITIZE)
  add_test(NAME demo_two_hosts
           COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/demo_two_hosts.sh
                   --bin-dir ${CMAKE_BINARY_DIR}/bin --count 20000)
  set_tests_properties(demo_two_hosts PROPERTIES LABELS multiprocess TIMEOUT 180)
endif()
