# README.md stays a ten-minute read: fails when it has more than MAX_LINES
# lines (tests/readme.cmake). What does not fit goes to a docs/ page that the
# README links to.
# Run as `cmake -DREADME=FILE -DMAX_LINES=N -P length.cmake`.
foreach(var README MAX_LINES)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "readme/length.cmake: ${var} is not set")
  endif()
endforeach()
if(NOT EXISTS "${README}")
  message(FATAL_ERROR "${README} does not exist")
endif()
file(READ "${README}" text)
string(REGEX MATCHALL "\n" newlines "${text}")
list(LENGTH newlines lines)
if(NOT text MATCHES "\n$" AND NOT text STREQUAL "")
  math(EXPR lines "${lines} + 1")  # a last line without its newline
endif()
if(lines GREATER MAX_LINES)
  message(FATAL_ERROR "README.md has ${lines} lines, more than ${MAX_LINES}: move the "
                      "details to the docs/ page of their structure and link to it")
endif()
message(STATUS "README.md: ${lines} lines (at most ${MAX_LINES})")
