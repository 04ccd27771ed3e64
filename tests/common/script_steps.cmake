# Shared by the `cmake -P` scripts of the install checks
# (tests/outside_project/check_install.cmake, tests/readme/outside.cmake).
# Set SHM_STEP_WHO (how messages begin) before including.

# Fails naming the first of the variables ARGN that is unset or empty.
function(shm_require_vars script)
  foreach(var ${ARGN})
    if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
      message(FATAL_ERROR "${script}: ${var} is not set")
    endif()
  endforeach()
endfunction()

# Runs the command ARGN; a non-zero exit fails the script, naming the step.
function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${SHM_STEP_WHO}: ${what} failed (${rc}): ${ARGN}")
  endif()
  message(STATUS "${SHM_STEP_WHO}: ${what}: ok")
endfunction()
