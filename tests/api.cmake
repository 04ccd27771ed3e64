# The public API's shape, checked from the installed headers' sources.
add_test(NAME api_no_default_timeout
         COMMAND ${CMAKE_COMMAND} -DHEADERS=${PROJECT_SOURCE_DIR}/libshm/include -P
                 ${CMAKE_CURRENT_SOURCE_DIR}/api/no_default_timeout.cmake)
set_tests_properties(api_no_default_timeout PROPERTIES LABELS "unit" TIMEOUT 60)
