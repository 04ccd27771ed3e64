# shm-bridge: its tests (tests/integration/bridge) start a real nats-server
# (Debian package nats-server, installed by scripts/setup.sh, found here at
# configure time) and run the shm-bridge daemon; they read its state segment
# through the shm_bridge library. With LIBSHM_BUILD_TOOLS and
# LIBSHM_BUILD_BRIDGE on (both default ON) the bridge is
# expected: when it could not be built (libnats-dev missing) the ctest entry
# shm_bridge_built fails instead of the bridge tests silently vanishing, and a
# missing nats-server fails every bridge test.
file(GLOB bridge_test_sources ${CMAKE_CURRENT_SOURCE_DIR}/integration/bridge/*_test.cpp)
if(TARGET shm_bridge AND TARGET shm_integration_tests)
  find_program(SHM_NATS_SERVER_PROGRAM nats-server PATHS /usr/sbin /usr/local/sbin /usr/bin)
  if(SHM_NATS_SERVER_PROGRAM)
    target_compile_definitions(shm_test_common PRIVATE
      SHM_NATS_SERVER="${SHM_NATS_SERVER_PROGRAM}")
  else()
    message(STATUS "nats-server not found: the shm-bridge tests will fail (scripts/setup.sh "
                   "installs it)")
  endif()
  target_link_libraries(shm_integration_tests PRIVATE shm_bridge)
  add_dependencies(shm_integration_tests shm-bridge)
else()
  if(bridge_test_sources)
    set_source_files_properties(${bridge_test_sources} PROPERTIES HEADER_FILE_ONLY ON)
  endif()
  if(LIBSHM_BUILD_TOOLS AND LIBSHM_BUILD_BRIDGE)
    add_test(NAME shm_bridge_built COMMAND sh -c
      "echo 'shm-bridge was not built: libnats-dev (the NATS C client) is missing; scripts/setup.sh installs it' >&2; exit 1")
    set_tests_properties(shm_bridge_built PROPERTIES LABELS multiprocess)
  endif()
endif()
