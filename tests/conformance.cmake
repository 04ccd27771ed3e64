# The egress conformance runner (tests/unit/egress/egress_conformance_test.cpp)
# reads the corpus tests/conformance/egress/*.json with nlohmann-json.
if(TARGET shm_unit_tests)
  find_package(nlohmann_json 3 REQUIRED)
  target_link_libraries(shm_unit_tests PRIVATE nlohmann_json::nlohmann_json)
endif()
