# The C++ code blocks of README.md and of every docs/*.md page are tests
# (ctest label: readme). At configure time every ```cpp block is extracted
# into <build>/readme/<page>/<name>.cpp, compiled against the in-tree library
# (with the project's warnings, as errors under LIBSHM_WERROR) and run, so a
# block that stops compiling fails the build and one that stops working fails
# its test. Editing a page re-runs the extraction on the next build.
#
# Names say where a block came from: README.md's block NAME is the target and
# ctest `readme_NAME`, docs/PAGE.md's is `docs_PAGE_NAME` (a `-` in PAGE
# becomes `_`). A name is unique within its page.
#
# Each ```cpp block must follow a marker line (an HTML comment: invisible on
# GitHub), else configuring fails naming the file and line:
#   <!-- readme-test: NAME -->                  the block is a complete program
#   <!-- readme-test: NAME harness=FILE -->     a snippet: tests/readme/FILE.cpp
#                                               with the block in place of its
#                                               `// README_BLOCK` line
# Programs run as one ctest each, alone, in a private LIBSHM_ROOT, unless a
# run line of the same page puts them together (one test, one fresh root):
#   <!-- readme-run: TEST = a ; b & c -->       a runs to completion, then b
#                                               and c run at the same time as
#                                               two processes; every one must
#                                               exit 0 (tests/readme/run.cmake)
#   <!-- readme-run: TEST = a:write ; a:read -->  NAME:ARG runs NAME with the
#                                               one argument ARG
#
# readme_length fails when README.md grows past 300 lines: the details go to
# docs/, the README stays a ten-minute read. install_readme_tour (below)
# builds README.md's programs against an installed tree and runs them.
#
# LIBSHM_BUILD_PAGE_PROGRAMS (default ON) builds and runs the blocks; OFF
# still checks the pages (markers, names, runs). scripts/test.sh builds and
# runs them in its ASan + UBSan lane only: they are programs of one thread
# (nothing for ThreadSanitizer to find; one, docs/spill-relay.md's
# seal_background, starts the library's sealer thread, which the unit tests
# run under TSan too), and what the normal lane would add, the optimized
# library, its other tests run; README.md's blocks are built there once more
# against the installed package (install_readme_tour). About 30 programs: 75 s
# of CPU per lane.
set(SHM_README_OUT ${CMAKE_BINARY_DIR}/readme)
set(SHM_PAGE_PROGRAMS ${LIBSHM_BUILD_PAGE_PROGRAMS})
set(SHM_README_MAX_LINES 300)
file(GLOB SHM_README_HARNESSES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/readme/*.cpp)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${SHM_README_HARNESSES})
file(GLOB SHM_DOCS_PAGES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/docs/*.md)

# Extracts, builds and registers the C++ blocks of one page. `rel` is the
# page's path in the tree (for messages), `prefix` the name of its targets
# and tests before the block's own. Sets `shm_page_count` in the caller and
# writes what runs to <out_dir>/tests.cmake (below).
function(shm_page_blocks page rel prefix)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${page})
  string(REGEX REPLACE "_$" "" out_dir "${prefix}")
  set(out_dir ${SHM_README_OUT}/${out_dir})

  # One list element per line, blank lines included. `;`, `[` and `]` would
  # split or glue list elements: they travel as placeholders and are restored per line.
  file(READ ${page} text)
  string(REPLACE ";" "<shm-semicolon>" text "${text}")
  string(REPLACE "[" "<shm-lbracket>" text "${text}")
  string(REPLACE "]" "<shm-rbracket>" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")

  set(programs)
  set(runs)
  set(tests)
  set(marker "")
  set(in_block OFF)
  set(line_no 0)
  foreach(line IN LISTS lines)
    math(EXPR line_no "${line_no} + 1")
    string(REPLACE "<shm-semicolon>" ";" line "${line}")
    string(REPLACE "<shm-lbracket>" "[" line "${line}")
    string(REPLACE "<shm-rbracket>" "]" line "${line}")
    if(in_block)
      if(line MATCHES "^```[ \t]*$")
        set(in_block OFF)
        if(harness)
          set(h ${CMAKE_CURRENT_SOURCE_DIR}/readme/${harness}.cpp)
          if(NOT EXISTS ${h})
            message(FATAL_ERROR "${rel}:${block_line}: harness ${h} does not exist")
          endif()
          file(READ ${h} harness_text)
          string(FIND "${harness_text}" "// README_BLOCK" at)
          if(at EQUAL -1)
            message(FATAL_ERROR "${h}: no `// README_BLOCK` line")
          endif()
          string(SUBSTRING "${harness_text}" 0 ${at} before)
          string(REGEX MATCHALL "\n" newlines "${before}")
          list(LENGTH newlines after_line)
          math(EXPR after_line "${after_line} + 2")
          string(REPLACE "// README_BLOCK"
            "#line ${block_line} \"${page}\"\n${block}#line ${after_line} \"${h}\""
            block "${harness_text}")
        else()
          set(block "#line ${block_line} \"${page}\"\n${block}")
        endif()
        set(out ${out_dir}/${name}.cpp)
        # Written only when changed, so an unrelated edit of the page rebuilds nothing.
        set(old "")
        if(EXISTS ${out})
          file(READ ${out} old)
        endif()
        if(NOT old STREQUAL block)
          file(WRITE ${out} "${block}")
        endif()
        list(APPEND programs ${name})
      else()
        string(APPEND block "${line}\n")
      endif()
      continue()
    endif()
    if(line MATCHES "^<!-- readme-test: ([A-Za-z0-9_]+)( harness=([A-Za-z0-9_]+))? -->$")
      set(marker ${CMAKE_MATCH_1})
      set(marker_harness "${CMAKE_MATCH_3}")
      set(marker_line ${line_no})
    elseif(line MATCHES "^<!-- readme-run: ([A-Za-z0-9_]+) = ([A-Za-z0-9_ ;&:-]+) -->$")
      if(CMAKE_MATCH_1 IN_LIST runs)
        message(FATAL_ERROR "${rel}:${line_no}: readme-run name ${CMAKE_MATCH_1} is used twice")
      endif()
      list(APPEND runs ${CMAKE_MATCH_1})
      string(REPLACE " " "" steps "${CMAKE_MATCH_2}")
      string(REPLACE ";" "," steps "${steps}")
      set(run_${CMAKE_MATCH_1} "${steps}")
      set(run_line_${CMAKE_MATCH_1} ${line_no})
    elseif(line MATCHES "^<!-- readme-")
      message(FATAL_ERROR "${rel}:${line_no}: malformed readme marker: ${line}")
    elseif(line MATCHES "^```(cpp|c\\+\\+|cc|cxx)[ \t]*$")
      math(EXPR above "${line_no} - 1")
      if(NOT marker OR NOT marker_line EQUAL above)
        message(FATAL_ERROR "${rel}:${line_no}: a C++ block without a "
                            "`<!-- readme-test: NAME -->` line right above it (tests/readme.cmake)")
      endif()
      if(marker IN_LIST programs)
        message(FATAL_ERROR "${rel}:${line_no}: readme-test name ${marker} is used twice")
      endif()
      set(name ${marker})
      set(harness "${marker_harness}")
      math(EXPR block_line "${line_no} + 1")
      set(block "")
      set(in_block ON)
      set(marker "")
    endif()
  endforeach()
  if(in_block)
    message(FATAL_ERROR "${rel}:${block_line}: the C++ block of ${name} is not closed")
  endif()

  # A block removed from the page leaves no source behind (the install test
  # builds every source of README.md's directory).
  file(GLOB old_sources ${out_dir}/*.cpp)
  foreach(old_source ${old_sources})
    get_filename_component(old_name ${old_source} NAME_WE)
    if(NOT old_name IN_LIST programs)
      file(REMOVE ${old_source})
    endif()
  endforeach()

  foreach(name ${programs})
    if(NOT SHM_PAGE_PROGRAMS)
      break()
    endif()
    add_executable(${prefix}${name} ${out_dir}/${name}.cpp)
    target_link_libraries(${prefix}${name} PRIVATE shm::shm libshm_warnings)
    set_target_properties(${prefix}${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${SHM_README_OUT}/bin)
  endforeach()

  set(in_runs)
  foreach(run ${runs})
    string(REGEX MATCHALL "[A-Za-z0-9_:-]+" used "${run_${run}}")
    foreach(step ${used})
      string(REGEX REPLACE ":.*" "" used_name "${step}")
      if(NOT used_name IN_LIST programs)
        message(FATAL_ERROR "${rel}:${run_line_${run}}: readme-run ${run} names ${used_name}, "
                            "which is no readme-test block of ${rel}")
      endif()
      list(APPEND in_runs ${used_name})
    endforeach()
    shm_page_test(${prefix} ${run} "${run_${run}}")
    list(APPEND tests "${run}=${run_${run}}")
  endforeach()
  foreach(name ${programs})
    if(NOT name IN_LIST in_runs)
      if(name IN_LIST runs)
        message(FATAL_ERROR "${rel}:${run_line_${name}}: readme-run ${name} has the name of a "
                            "block no run runs: the two tests would have one name")
      endif()
      shm_page_test(${prefix} ${name} ${name})
      list(APPEND tests "${name}=${name}")
    endif()
  endforeach()
  list(LENGTH programs count)
  set(shm_page_count ${count} PARENT_SCOPE)
  # What runs, for a test that builds the page's programs elsewhere (the
  # install test builds README.md's outside the tree): `set(SHM_PAGE_TESTS
  # "TEST=STEPS;...")` in <out_dir>/tests.cmake, the sources beside it.
  if(programs)
    file(WRITE ${out_dir}/tests.cmake.new "set(SHM_PAGE_TESTS \"${tests}\")\n")
    file(COPY_FILE ${out_dir}/tests.cmake.new ${out_dir}/tests.cmake ONLY_IF_DIFFERENT)
    file(REMOVE ${out_dir}/tests.cmake.new)
  endif()
endfunction()

function(shm_page_test prefix test steps)
  if(NOT SHM_PAGE_PROGRAMS)
    return()
  endif()
  add_test(NAME ${prefix}${test}
    COMMAND ${CMAKE_COMMAND} -DSHM_README_BIN=${SHM_README_OUT}/bin "-DSHM_README_STEPS=${steps}"
      -DSHM_README_PREFIX=${prefix} -DSHM_README_TEST=${prefix}${test}
      -P ${CMAKE_CURRENT_SOURCE_DIR}/readme/run.cmake)
  set_tests_properties(${prefix}${test} PROPERTIES LABELS readme TIMEOUT 120)
endfunction()

shm_page_blocks(${PROJECT_SOURCE_DIR}/README.md README.md readme_)
if(shm_page_count EQUAL 0)
  message(FATAL_ERROR "README.md: no C++ blocks found (tests/readme.cmake)")
endif()
set(shm_blocks_total ${shm_page_count})
set(shm_blocks_pages 1)
foreach(page ${SHM_DOCS_PAGES})
  get_filename_component(file ${page} NAME)
  get_filename_component(stem ${page} NAME_WE)
  string(REPLACE "-" "_" stem "${stem}")
  shm_page_blocks(${page} docs/${file} docs_${stem}_)
  if(shm_page_count GREATER 0)
    math(EXPR shm_blocks_total "${shm_blocks_total} + ${shm_page_count}")
    math(EXPR shm_blocks_pages "${shm_blocks_pages} + 1")
  endif()
endforeach()
message(STATUS "README.md and docs/: ${shm_blocks_total} C++ blocks of ${shm_blocks_pages} "
               "pages extracted to ${SHM_README_OUT}")

add_test(NAME readme_length
         COMMAND ${CMAKE_COMMAND} -DREADME=${PROJECT_SOURCE_DIR}/README.md
                 -DMAX_LINES=${SHM_README_MAX_LINES} -P ${CMAKE_CURRENT_SOURCE_DIR}/readme/length.cmake)
set_tests_properties(readme_length PROPERTIES LABELS "unit;readme" TIMEOUT 60)

# install_readme_tour: README.md's programs built outside the tree against a
# fresh install, with find_package and with pkg-config, and each run as the README runs it
# (tests/readme/outside.cmake). The normal lane runs it; what a user copies is
# the same in every lane.
if(LIBSHM_SANITIZE STREQUAL "")
  include(GNUInstallDirs)
  add_test(NAME install_readme_tour
    COMMAND ${CMAKE_COMMAND}
      -DSHM_BUILD_DIR=${CMAKE_BINARY_DIR}
      -DSHM_WORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/install_readme_tour
      -DSHM_TOUR_DIR=${SHM_README_OUT}/readme
      -DSHM_GENERATOR=${CMAKE_GENERATOR}
      -DSHM_CXX_COMPILER=${CMAKE_CXX_COMPILER}
      -DSHM_INSTALL_LIBDIR=${CMAKE_INSTALL_LIBDIR}
      -P ${CMAKE_CURRENT_SOURCE_DIR}/readme/outside.cmake)
  # COST: started early, as install_find_package: it builds the tour's programs.
  set_tests_properties(install_readme_tour PROPERTIES LABELS "install;readme" TIMEOUT 600 COST 800)
endif()
