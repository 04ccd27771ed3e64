# No public call waits forever unless its caller says so: a blocking call
# takes its timeout explicitly (shm::forever to wait until its condition
# holds), never as a default argument. Fails naming each header line that
# gives a timeout or deadline parameter a default, or defaults anything to
# shm::forever. Run by ctest (tests/api.cmake) with -DHEADERS=<include dir>.
file(GLOB_RECURSE headers "${HEADERS}/*.hpp")
set(found "")
foreach(header ${headers})
  file(STRINGS "${header}" lines)
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    if(line MATCHES "chrono::[a-z_]+ +[a-z_]*(timeout|deadline)[a-z_]* *= *[^=]" OR
       (line MATCHES "= *(shm::)?forever" AND NOT line MATCHES "constexpr"))
      file(RELATIVE_PATH rel "${HEADERS}" "${header}")
      string(STRIP "${line}" code)
      string(APPEND found "\n  ${rel}:${n}: ${code}")
    endif()
  endforeach()
endforeach()
list(LENGTH headers count)
if(count EQUAL 0)
  message(FATAL_ERROR "no public header under ${HEADERS}: the check checked nothing")
endif()
if(found)
  message(FATAL_ERROR "a public call defaults its timeout (pass it explicitly; shm::forever "
                      "waits until the condition holds):${found}")
endif()
message(STATUS "${count} public headers: no call defaults its timeout")
