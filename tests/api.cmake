# The public API's shape, checked from the installed headers' sources.
add_test(NAME api_no_default_timeout
         COMMAND ${CMAKE_COMMAND} -DHEADERS=${PROJECT_SOURCE_DIR}/libshm/include -P
                 ${CMAKE_CURRENT_SOURCE_DIR}/api/no_default_timeout.cmake)
set_tests_properties(api_no_default_timeout PROPERTIES LABELS "unit" TIMEOUT 60)

# Every public declaration has a doc comment: Doxygen over the public headers
# with WARN_IF_UNDOCUMENTED, failing on any warning (cmake/check_documented.cmake).
add_test(NAME api_documented
         COMMAND ${CMAKE_COMMAND} -DDOXYGEN=${SHM_DOXYGEN} -DDOXYFILE=${CMAKE_BINARY_DIR}/docs/Doxyfile-api-check
                 -DOUT=${CMAKE_BINARY_DIR}/docs/api-check -P ${PROJECT_SOURCE_DIR}/cmake/check_documented.cmake)
set_tests_properties(api_documented PROPERTIES LABELS "unit" TIMEOUT 120)
