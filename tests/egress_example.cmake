# The egress_transport example end to end: producer, receiver and a transport
# killed -9 and replaced every 1000 acknowledged payloads, over a link that
# drops, duplicates and loses acks; exits 0 when every payload was
# acknowledged and nothing became a dead letter.
if(TARGET egress_transport)
  add_test(NAME example_egress_transport_demo
           COMMAND egress_transport demo --count 5000 --loss 0.02 --kill-every 1000)
  set_tests_properties(example_egress_transport_demo PROPERTIES
    LABELS multiprocess
    TIMEOUT 120
    ENVIRONMENT "LIBSHM_ROOT=${CMAKE_BINARY_DIR}/example-egress-root")
endif()
