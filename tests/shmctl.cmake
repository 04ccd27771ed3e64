# shmctl's integration tests parse the tool's --json output with nlohmann-json.
if(TARGET shm_integration_tests)
  find_package(nlohmann_json 3 REQUIRED)
  target_link_libraries(shm_integration_tests PRIVATE nlohmann_json::nlohmann_json)
endif()
