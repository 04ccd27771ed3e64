# Run by the ctest entry install_readme_tour (tests/readme.cmake) as `cmake -P`:
# installs the build tree into a fresh prefix, builds README.md's tour
# programs against that prefix twice, through find_package(libshm) (the
# project in outside/) and with nothing but the compiler and
# `pkg-config --cflags --libs libshm`, and runs each test as the README runs
# it (tests/readme/run.cmake: its processes one after the other or side by side).
set(SHM_STEP_WHO "README tour")
include(${CMAKE_CURRENT_LIST_DIR}/../common/script_steps.cmake)
shm_require_vars(readme/outside.cmake SHM_BUILD_DIR SHM_WORK_DIR SHM_TOUR_DIR SHM_GENERATOR
  SHM_CXX_COMPILER SHM_INSTALL_LIBDIR)
set(prefix ${SHM_WORK_DIR}/prefix)
set(build ${SHM_WORK_DIR}/build)
file(REMOVE_RECURSE ${SHM_WORK_DIR})

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

# 1. Install, then build with find_package against the prefix alone.
run_step("cmake --install" ${CMAKE_COMMAND} --install ${SHM_BUILD_DIR} --prefix ${prefix})
run_step("configure (find_package)" ${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR}/outside
  -B ${build} -G ${SHM_GENERATOR} -DCMAKE_CXX_COMPILER=${SHM_CXX_COMPILER}
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  -DCMAKE_DISABLE_FIND_PACKAGE_fmt=ON -DSHM_TOUR_DIR=${SHM_TOUR_DIR})
run_step("build (find_package)" ${CMAKE_COMMAND} --build ${build} --parallel 2)
run_tour("find_package" ${build})

# 2. The compiler and pkg-config alone (only the installed libshm.pc visible).
find_program(PKG_CONFIG NAMES pkg-config pkgconf REQUIRED)
set(pc_env ${CMAKE_COMMAND} -E env PKG_CONFIG_LIBDIR=${prefix}/${SHM_INSTALL_LIBDIR}/pkgconfig
  PKG_CONFIG_PATH=)
foreach(part cflags libs)
  execute_process(COMMAND ${pc_env} ${PKG_CONFIG} --${part} libshm
    OUTPUT_VARIABLE pc_${part} OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "README tour: pkg-config --${part} libshm failed (${rc})")
  endif()
  separate_arguments(pc_${part} UNIX_COMMAND "${pc_${part}}")
endforeach()
file(GLOB tour_sources ${SHM_TOUR_DIR}/*.cpp)
set(bin ${build}/pkgconfig)
file(MAKE_DIRECTORY ${bin})
# Two compilers at a time: execute_process runs its COMMANDs side by side.
set(pending)
foreach(source ${tour_sources})
  get_filename_component(name ${source} NAME_WE)
  list(APPEND pending "${name}")
endforeach()
while(pending)
  set(commands)
  set(names)
  foreach(i RANGE 1)
    list(LENGTH pending left)
    if(left EQUAL 0)
      break()
    endif()
    list(POP_FRONT pending name)
    list(APPEND names ${name})
    list(APPEND commands COMMAND ${SHM_CXX_COMPILER} -g -Wall -Wextra -Wno-missing-field-initializers
      ${pc_cflags} ${SHM_TOUR_DIR}/${name}.cpp -o ${bin}/tour_${name} ${pc_libs})
  endforeach()
  execute_process(${commands} RESULTS_VARIABLE codes)
  foreach(name code IN ZIP_LISTS names codes)
    if(NOT code EQUAL 0)
      message(FATAL_ERROR "README tour: building ${name} with pkg-config failed (${code})")
    endif()
    message(STATUS "README tour: build ${name} (pkg-config): ok")
  endforeach()
endwhile()
run_tour("pkg-config" ${bin})
message(STATUS "README tour: built against ${prefix} both ways, every test ran: ok")
