# The relay conformance runner (tests/unit/relay/relay_conformance_test.cpp)
# reads tests/conformance/relay/*.json with nlohmann-json.
if(TARGET shm_unit_tests)
  find_package(nlohmann_json 3 REQUIRED)
  target_link_libraries(shm_unit_tests PRIVATE nlohmann_json::nlohmann_json)
endif()
