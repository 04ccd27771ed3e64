# ctest entry "install_find_package" (label: install): installs this build into a
# temporary prefix with `cmake --install`, then configures, builds and runs
# tests/outside_project against it through find_package(libshm), as a user's
# project would (with fmt unfindable: the package must not need it): every
# installed header alone and all together, and a Debug program (no NDEBUG) run
# as a ring user and as a channel producer and consumer in two processes. The
# same program is then built once more with nothing but the compiler and
# `pkg-config --cflags --libs libshm`, and run. The example programs must be
# installed in <prefix>/${CMAKE_INSTALL_LIBEXECDIR}/libshm, and the installed
# egress_transport runs there (a producer, a receiver and a transport killed
# -9 and replaced). The steps are in outside_project/check_install.cmake.
# The normal lane runs it; the sanitizer lanes do not. What is installed (the
# headers, the package files, the programs) is the same in every lane, and the
# library code the outside program drives is what every other test of those
# lanes runs under the sanitizers: there the entry only compiled an outside
# project once more (about 70 s of CPU per lane, beside the next lane's build).
if(NOT LIBSHM_SANITIZE STREQUAL "")
  return()
endif()
include(GNUInstallDirs)

# Whether this build's library is compiled with NDEBUG (the outside program is
# always Debug: check_install.cmake reports which mix it checked).
string(TOUPPER "${CMAKE_BUILD_TYPE}" SHM_BUILD_TYPE_UPPER)
if("${CMAKE_CXX_FLAGS} ${CMAKE_CXX_FLAGS_${SHM_BUILD_TYPE_UPPER}}" MATCHES "-DNDEBUG")
  set(SHM_OUTSIDE_LIBRARY_NDEBUG ON)
else()
  set(SHM_OUTSIDE_LIBRARY_NDEBUG OFF)
endif()
if(TARGET shmctl)
  set(SHM_OUTSIDE_EXPECT_SHMCTL ON)
else()
  set(SHM_OUTSIDE_EXPECT_SHMCTL OFF)
endif()
# The example programs this build installs (examples/CMakeLists.txt), comma
# separated: empty when LIBSHM_BUILD_EXAMPLES is off.
get_property(SHM_OUTSIDE_EXAMPLES GLOBAL PROPERTY SHM_EXAMPLE_PROGRAMS)
string(REPLACE ";" "," SHM_OUTSIDE_EXAMPLES "${SHM_OUTSIDE_EXAMPLES}")

add_test(NAME install_find_package
  COMMAND ${CMAKE_COMMAND}
    -DSHM_BUILD_DIR=${CMAKE_BINARY_DIR}
    -DSHM_PROJECT_DIR=${CMAKE_CURRENT_SOURCE_DIR}/outside_project
    -DSHM_WORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/install_find_package
    -DSHM_GENERATOR=${CMAKE_GENERATOR}
    -DSHM_CXX_COMPILER=${CMAKE_CXX_COMPILER}
    -DSHM_BUILD_TYPE=${CMAKE_BUILD_TYPE}
    "-DSHM_CXX_FLAGS="
    -DSHM_EXPECT_SHMCTL=${SHM_OUTSIDE_EXPECT_SHMCTL}
    -DSHM_LIBRARY_NDEBUG=${SHM_OUTSIDE_LIBRARY_NDEBUG}
    -DSHM_CHECK_HEADERS=ON
    -DSHM_INSTALL_LIBDIR=${CMAKE_INSTALL_LIBDIR}
    -DSHM_INSTALL_LIBEXECDIR=${CMAKE_INSTALL_LIBEXECDIR}
    "-DSHM_EXPECT_EXAMPLES=${SHM_OUTSIDE_EXAMPLES}"
    -P ${CMAKE_CURRENT_SOURCE_DIR}/outside_project/check_install.cmake)
# COST: started first, as the soak (tests/sidecar.cmake): one of the longest entries.
set_tests_properties(install_find_package PROPERTIES LABELS install TIMEOUT 300 COST 900)
