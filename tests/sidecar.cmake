# shm-sidecar: its tests link the monitor library and need the daemon built;
# the soak (scripts/soak.sh, every kind: spsc, fanout, ledger, relay with
# spill, egress, topic) runs 30 s as a ctest entry labelled "soak" (about 35-37 s
# wall in the normal lane, 40-42 s under asan and tsan, on a loaded 2-vCPU VM;
# the start, the drains and the verifiers add to the 30 s).
if(TARGET shm_sidecar_monitor)
  foreach(binary shm_unit_tests ${SHM_PROCESS_TEST_BINARIES})
    if(TARGET ${binary})
      target_link_libraries(${binary} PRIVATE shm_sidecar_monitor)
      add_dependencies(${binary} shm-sidecar)
    endif()
  endforeach()
  # 30 s in a plain build, 15 s under a sanitizer: the same kinds, kills and
  # verifiers (a run is long enough for several kills of each), at half the
  # CPU in the two lanes whose programs run 3-10 times slower.
  if(LIBSHM_SANITIZE STREQUAL "")
    set(SHM_SOAK_SECONDS 30)
  else()
    set(SHM_SOAK_SECONDS 15)
  endif()
  add_test(NAME soak
    COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/soak.sh --build-dir ${CMAKE_BINARY_DIR}
      --duration ${SHM_SOAK_SECONDS})
  # COST: the longest entries start first (ctest -j orders by cost; a clean
  # build has no timings of its own), not last with nothing left beside them.
  set_tests_properties(soak PROPERTIES LABELS soak TIMEOUT 240 COST 1000)
else()
  # Tools not built (LIBSHM_BUILD_TOOLS=OFF): nothing to test; keep the
  # sidecar's test files out of the test binaries.
  file(GLOB sidecar_test_sources ${CMAKE_CURRENT_SOURCE_DIR}/unit/sidecar/*_test.cpp
       ${CMAKE_CURRENT_SOURCE_DIR}/integration/sidecar/*_test.cpp)
  if(sidecar_test_sources)
    set_source_files_properties(${sidecar_test_sources} PROPERTIES HEADER_FILE_ONLY ON)
  endif()
endif()
