# shmctl's integration tests parse the tool's --json output with nlohmann-json.
if(TARGET shm_integration_tests)
  find_package(nlohmann_json 3 REQUIRED)
  foreach(binary ${SHM_PROCESS_TEST_BINARIES})
    target_link_libraries(${binary} PRIVATE nlohmann_json::nlohmann_json)
  endforeach()
endif()
