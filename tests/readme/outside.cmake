# Run by the ctest entry install_readme_tour (tests/readme.cmake) as `cmake -P`:
# installs the build tree into a fresh prefix, builds README.md's tour
# programs against that prefix through find_package(libshm) (the project in
# outside/), and runs each test as the README runs it (tests/readme/run.cmake:
# its processes one after the other or side by side). A build with nothing but
# the compiler and `pkg-config --cflags --libs libshm` is install_find_package's
# (tests/install.cmake): the flags are the same for every program, so building
# the tour a second time that way checked nothing more.
foreach(var SHM_BUILD_DIR SHM_WORK_DIR SHM_TOUR_DIR SHM_GENERATOR SHM_CXX_COMPILER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "readme/outside.cmake: ${var} is not set")
  endif()
endforeach()
set(prefix ${SHM_WORK_DIR}/prefix)
set(build ${SHM_WORK_DIR}/build)
file(REMOVE_RECURSE ${SHM_WORK_DIR})

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "README tour: ${what} failed (${rc}): ${ARGN}")
  endif()
  message(STATUS "README tour: ${what}: ok")
endfunction()

# What runs: SHM_PAGE_TESTS, "TEST=STEPS;...", written by tests/readme.cmake.
include(${SHM_TOUR_DIR}/tests.cmake)
if(NOT SHM_PAGE_TESTS)
  message(FATAL_ERROR "README tour: no tests in ${SHM_TOUR_DIR}/tests.cmake")
endif()
function(run_tour how bin)
  foreach(test ${SHM_PAGE_TESTS})
    string(REGEX MATCH "^([^=]+)=(.+)$" _ "${test}")
    run_step("${CMAKE_MATCH_1} (${how})" ${CMAKE_COMMAND} -DSHM_README_BIN=${bin}
      -DSHM_README_PREFIX=tour_ "-DSHM_README_STEPS=${CMAKE_MATCH_2}"
      -DSHM_README_TEST=outside-${CMAKE_MATCH_1} -P ${CMAKE_CURRENT_LIST_DIR}/run.cmake)
  endforeach()
endfunction()

# Install, then build with find_package against the prefix alone.
run_step("cmake --install" ${CMAKE_COMMAND} --install ${SHM_BUILD_DIR} --prefix ${prefix})
run_step("configure (find_package)" ${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR}/outside
  -B ${build} -G ${SHM_GENERATOR} -DCMAKE_CXX_COMPILER=${SHM_CXX_COMPILER}
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  -DCMAKE_DISABLE_FIND_PACKAGE_fmt=ON -DSHM_TOUR_DIR=${SHM_TOUR_DIR})
run_step("build (find_package)" ${CMAKE_COMMAND} --build ${build} --parallel 2)
run_tour("find_package" ${build})

message(STATUS "README tour: built against ${prefix} with find_package, every test ran: ok")
