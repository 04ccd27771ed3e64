# The topic_frames example end to end: a publisher of 1 MiB frames and three
# subscriber processes (two Block, one DropOldest); exits 0 when every frame
# reached the Block subscribers intact and the DropOldest one counted what it
# missed.
if(TARGET topic_frames)
  add_test(NAME example_topic_frames_demo COMMAND topic_frames demo 100)
  set_tests_properties(example_topic_frames_demo PROPERTIES
    LABELS multiprocess
    TIMEOUT 120
    ENVIRONMENT "LIBSHM_ROOT=${CMAKE_BINARY_DIR}/example-topic-root")
endif()
