# The README's C++ code blocks are tests (ctest label: readme). At configure
# time every ```cpp block of README.md is extracted into
# <build>/readme/<name>.cpp, compiled against the in-tree library (with the
# project's warnings, as errors under LIBSHM_WERROR) and run, so a block that
# stops compiling fails the build and one that stops working fails its test.
# Editing README.md re-runs the extraction on the next build.
#
# Each ```cpp block must follow a marker line (an HTML comment: invisible on
# GitHub), else configuring fails:
#   <!-- readme-test: NAME -->                  the block is a complete program
#   <!-- readme-test: NAME harness=FILE -->     a snippet: tests/readme/FILE.cpp
#                                               with the block in place of its
#                                               `// README_BLOCK` line
# Programs run as ctest `readme_NAME`, alone, in a private LIBSHM_ROOT, unless
# a run line puts them together (one test, one fresh root):
#   <!-- readme-run: TEST = a ; b & c -->       a runs to completion, then b
#                                               and c run at the same time as
#                                               two processes; every one must
#                                               exit 0 (tests/readme/run.cmake)
set(SHM_README ${PROJECT_SOURCE_DIR}/README.md)
set(SHM_README_OUT ${CMAKE_BINARY_DIR}/readme)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${SHM_README})
file(GLOB SHM_README_HARNESSES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/readme/*.cpp)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${SHM_README_HARNESSES})

# One list element per line, blank lines included. `;`, `[` and `]` would
# split or glue list elements: they travel as placeholders and are restored per line.
file(READ ${SHM_README} shm_readme_text)
string(REPLACE ";" "<shm-semicolon>" shm_readme_text "${shm_readme_text}")
string(REPLACE "[" "<shm-lbracket>" shm_readme_text "${shm_readme_text}")
string(REPLACE "]" "<shm-rbracket>" shm_readme_text "${shm_readme_text}")
string(REPLACE "\n" ";" shm_readme_lines "${shm_readme_text}")

set(shm_readme_programs)
set(shm_readme_runs)
set(shm_marker "")
set(shm_in_block OFF)
set(shm_line_no 0)
foreach(line IN LISTS shm_readme_lines)
  math(EXPR shm_line_no "${shm_line_no} + 1")
  string(REPLACE "<shm-semicolon>" ";" line "${line}")
  string(REPLACE "<shm-lbracket>" "[" line "${line}")
  string(REPLACE "<shm-rbracket>" "]" line "${line}")
  if(shm_in_block)
    if(line MATCHES "^```[ \t]*$")
      set(shm_in_block OFF)
      if(shm_harness)
        set(h ${CMAKE_CURRENT_SOURCE_DIR}/readme/${shm_harness}.cpp)
        if(NOT EXISTS ${h})
          message(FATAL_ERROR "README.md:${shm_block_line}: harness ${h} does not exist")
        endif()
        file(READ ${h} shm_harness_text)
        string(FIND "${shm_harness_text}" "// README_BLOCK" at)
        if(at EQUAL -1)
          message(FATAL_ERROR "${h}: no `// README_BLOCK` line")
        endif()
        string(SUBSTRING "${shm_harness_text}" 0 ${at} before)
        string(REGEX MATCHALL "\n" newlines "${before}")
        list(LENGTH newlines after_line)
        math(EXPR after_line "${after_line} + 2")
        string(REPLACE "// README_BLOCK"
          "#line ${shm_block_line} \"${SHM_README}\"\n${shm_block}#line ${after_line} \"${h}\""
          shm_block "${shm_harness_text}")
      else()
        set(shm_block "#line ${shm_block_line} \"${SHM_README}\"\n${shm_block}")
      endif()
      set(shm_out ${SHM_README_OUT}/${shm_name}.cpp)
      # Written only when changed, so an unrelated README edit rebuilds nothing.
      set(old "")
      if(EXISTS ${shm_out})
        file(READ ${shm_out} old)
      endif()
      if(NOT old STREQUAL shm_block)
        file(WRITE ${shm_out} "${shm_block}")
      endif()
      list(APPEND shm_readme_programs ${shm_name})
    else()
      string(APPEND shm_block "${line}\n")
    endif()
    continue()
  endif()
  if(line MATCHES "^<!-- readme-test: ([A-Za-z0-9_]+)( harness=([A-Za-z0-9_]+))? -->$")
    set(shm_marker ${CMAKE_MATCH_1})
    set(shm_marker_harness "${CMAKE_MATCH_3}")
    set(shm_marker_line ${shm_line_no})
  elseif(line MATCHES "^<!-- readme-run: ([A-Za-z0-9_]+) = ([A-Za-z0-9_ ;&]+) -->$")
    list(APPEND shm_readme_runs ${CMAKE_MATCH_1})
    string(REPLACE " " "" steps "${CMAKE_MATCH_2}")
    string(REPLACE ";" "," steps "${steps}")
    set(shm_run_${CMAKE_MATCH_1} "${steps}")
  elseif(line MATCHES "^<!-- readme-")
    message(FATAL_ERROR "README.md:${shm_line_no}: malformed readme marker: ${line}")
  elseif(line MATCHES "^```(cpp|c\\+\\+|cc|cxx)[ \t]*$")
    math(EXPR shm_above "${shm_line_no} - 1")
    if(NOT shm_marker OR NOT shm_marker_line EQUAL shm_above)
      message(FATAL_ERROR "README.md:${shm_line_no}: a C++ block without a "
                          "`<!-- readme-test: NAME -->` line right above it (tests/readme.cmake)")
    endif()
    if(shm_marker IN_LIST shm_readme_programs)
      message(FATAL_ERROR "README.md:${shm_line_no}: readme-test name ${shm_marker} is used twice")
    endif()
    set(shm_name ${shm_marker})
    set(shm_harness "${shm_marker_harness}")
    math(EXPR shm_block_line "${shm_line_no} + 1")
    set(shm_block "")
    set(shm_in_block ON)
    set(shm_marker "")
  endif()
endforeach()
if(shm_in_block)
  message(FATAL_ERROR "README.md: the C++ block of ${shm_name} is not closed")
endif()
list(LENGTH shm_readme_programs shm_readme_count)
if(shm_readme_count EQUAL 0)
  message(FATAL_ERROR "README.md: no C++ blocks found (tests/readme.cmake)")
endif()

set(shm_readme_targets)
foreach(name ${shm_readme_programs})
  add_executable(readme_${name} ${SHM_README_OUT}/${name}.cpp)
  target_link_libraries(readme_${name} PRIVATE shm::shm libshm_warnings)
  set_target_properties(readme_${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${SHM_README_OUT}/bin)
  list(APPEND shm_readme_targets readme_${name})
endforeach()

function(shm_readme_test test steps)
  add_test(NAME readme_${test}
    COMMAND ${CMAKE_COMMAND} -DSHM_README_BIN=${SHM_README_OUT}/bin "-DSHM_README_STEPS=${steps}"
      -DSHM_README_TEST=${test} -P ${CMAKE_CURRENT_SOURCE_DIR}/readme/run.cmake)
  set_tests_properties(readme_${test} PROPERTIES LABELS readme TIMEOUT 120)
endfunction()

set(shm_readme_in_runs)
foreach(run ${shm_readme_runs})
  string(REGEX MATCHALL "[A-Za-z0-9_]+" used "${shm_run_${run}}")
  foreach(name ${used})
    if(NOT name IN_LIST shm_readme_programs)
      message(FATAL_ERROR "README.md: readme-run ${run} names ${name}, which is no readme-test block")
    endif()
  endforeach()
  list(APPEND shm_readme_in_runs ${used})
  shm_readme_test(${run} "${shm_run_${run}}")
endforeach()
foreach(name ${shm_readme_programs})
  if(NOT name IN_LIST shm_readme_in_runs)
    shm_readme_test(${name} ${name})
  endif()
endforeach()
message(STATUS "README.md: ${shm_readme_count} C++ blocks extracted to ${SHM_README_OUT}")
