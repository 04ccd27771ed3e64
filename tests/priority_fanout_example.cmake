# The fanout_jobs example end to end: one producer and two workers (one of them
# dedicated to the top priority) as separate processes; exits 0 when every
# process succeeded and no job was left in the queue.
if(TARGET fanout_jobs)
  add_test(NAME example_fanout_jobs_demo COMMAND fanout_jobs demo 20000)
  set_tests_properties(example_fanout_jobs_demo PROPERTIES
    LABELS multiprocess
    TIMEOUT 120
    ENVIRONMENT "LIBSHM_ROOT=${CMAKE_BINARY_DIR}/example-fanout-root")
endif()
