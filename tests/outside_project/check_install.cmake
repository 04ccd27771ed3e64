# Run by the ctest entry install_find_package (tests/install.cmake) as
# `cmake -P`: install the build tree into a fresh prefix, build this directory's
# project against that prefix only, and run it.
foreach(var SHM_BUILD_DIR SHM_PROJECT_DIR SHM_WORK_DIR SHM_GENERATOR SHM_CXX_COMPILER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "check_install.cmake: ${var} is not set")
  endif()
endforeach()

set(prefix ${SHM_WORK_DIR}/prefix)
set(build ${SHM_WORK_DIR}/build)
file(REMOVE_RECURSE ${SHM_WORK_DIR})

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install test: ${what} failed (${rc}): ${ARGN}")
  endif()
  message(STATUS "install test: ${what}: ok")
endfunction()

# 1. Install the build tree.
run_step("cmake --install" ${CMAKE_COMMAND} --install ${SHM_BUILD_DIR} --prefix ${prefix})
if(SHM_EXPECT_SHMCTL)
  if(NOT EXISTS ${prefix}/bin/shmctl)
    message(FATAL_ERROR "install test: ${prefix}/bin/shmctl was not installed")
  endif()
  run_step("installed shmctl --help" ${prefix}/bin/shmctl --help OUTPUT_QUIET)
endif()

# 2. Configure and build the outside project against the prefix alone (no
#    package registry, so nothing but the install tree can satisfy it).
run_step("configure outside project" ${CMAKE_COMMAND} -S ${SHM_PROJECT_DIR} -B ${build}
  -G ${SHM_GENERATOR}
  -DCMAKE_CXX_COMPILER=${SHM_CXX_COMPILER}
  -DCMAKE_BUILD_TYPE=${SHM_BUILD_TYPE}
  "-DCMAKE_CXX_FLAGS=${SHM_CXX_FLAGS}"
  "-DCMAKE_EXE_LINKER_FLAGS=${SHM_CXX_FLAGS}"
  -DCMAKE_PREFIX_PATH=${prefix}
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  -DLIBSHM_EXPECTED_PREFIX=${prefix})
run_step("build outside project" ${CMAKE_COMMAND} --build ${build} --parallel 1)

# 3. Run it in a private segment root.
string(RANDOM LENGTH 8 suffix)
set(root /dev/shm/libshm-install-test-${suffix})
execute_process(COMMAND ${CMAKE_COMMAND} -E env LIBSHM_ROOT=${root} ${build}/outside_main
  RESULT_VARIABLE rc)
file(REMOVE_RECURSE ${root})
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "install test: outside_main failed (${rc})")
endif()
message(STATUS "install test: outside project built against ${prefix} and ran: ok")
