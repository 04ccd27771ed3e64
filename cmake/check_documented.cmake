# Runs Doxygen over the public headers and fails naming every declaration it
# finds undocumented (and every other Doxygen warning: a broken command in a
# comment is a documentation bug too). Run by ctest api_documented
# (tests/api.cmake) and by the docs target, with -DDOXYGEN=<exe>
# -DDOXYFILE=<configured Doxyfile> -DOUT=<its output directory>.
if(NOT DOXYGEN)
  message(FATAL_ERROR "doxygen is not installed: scripts/setup.sh installs it (Debian package doxygen)")
endif()
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")
execute_process(COMMAND "${DOXYGEN}" "${DOXYFILE}" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "doxygen ${DOXYFILE} failed (${rc}): ${err}")
endif()
file(STRINGS "${OUT}/warnings.log" warnings REGEX "warning:")
list(LENGTH warnings count)
if(count GREATER 0)
  list(JOIN warnings "\n  " text)
  message(FATAL_ERROR "${count} public declarations lack a doc comment (or have a broken one); "
                      "write a /// comment above each (or ///< after a member):\n  ${text}")
endif()
if(NOT EXISTS "${OUT}/html/index.html")
  message(FATAL_ERROR "doxygen wrote no ${OUT}/html/index.html: the check checked nothing")
endif()
message(STATUS "every public declaration is documented; reference in ${OUT}/html/index.html")
