# Installs the build to a scratch prefix, then configures, builds and runs a
# tiny project that uses find_package(statecache) and statecache::client.
# Run by ctest (label `package`); arguments come as -D definitions:
#   BUILD_DIR     the configured and built statecache build tree
#   CONSUMER_DIR  tests/package/consumer
#   WORK_DIR      scratch directory (wiped first)
#   GENERATOR     CMake generator for the consumer
#   CXX_COMPILER  the compiler statecache was built with
#   CXX_FLAGS     compile and link flags the library needs (sanitizers)
foreach(var BUILD_DIR CONSUMER_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_package_test.cmake: ${var} not set")
  endif()
endforeach()

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}")
  endif()
  message(STATUS "${what}: ok")
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run_step("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
run_step("configure consumer"
  ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
  -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
  -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
  "-DCMAKE_EXE_LINKER_FLAGS=${CXX_FLAGS}")
# One job: the machine is shared.
run_step("build consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/build -j 1)
run_step("run consumer" ${WORK_DIR}/build/consumer)
