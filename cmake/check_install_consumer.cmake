# cmake -P script behind the install.consumer test.
#
#   cmake -D BUILD_DIR=<typeflow build tree> -D CONFIG=<config>
#         -D CONSUMER_SOURCE_DIR=<tests/install_consumer> -D WORK_DIR=<scratch dir>
#         -D GENERATOR=<generator> -D CXX_COMPILER=<c++>
#         -P check_install_consumer.cmake
#
# Installs the build tree into WORK_DIR/prefix, configures and builds the
# consumer project against that prefix (CMAKE_PREFIX_PATH only), checks that
# find_package found typeflow there and not elsewhere, and runs the consumer:
# typeflow_consumer (typeflow::typeflow) and typeflow_mpi_consumer
# (typeflow::mpi, one process without mpirun). Then configures the consumer
# once more with MPI hidden (CMAKE_DISABLE_FIND_PACKAGE_MPI): the package must
# still load, with typeflow::typeflow and without typeflow::mpi.
cmake_minimum_required(VERSION 3.22)

foreach(var BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_install_consumer.cmake: -D ${var}=... is required")
  endif()
endforeach()
if(NOT CONFIG)
  set(CONFIG Release)
endif()

set(prefix ${WORK_DIR}/prefix)
set(consumer_build ${WORK_DIR}/build)
set(no_mpi_build ${WORK_DIR}/build-no-mpi)
file(REMOVE_RECURSE ${prefix} ${consumer_build} ${no_mpi_build})

function(run_step description)
  message("-- ${description}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${description} failed (${result}):\n${output}")
  endif()
  set(step_output "${output}" PARENT_SCOPE)
endfunction()

run_step("install ${BUILD_DIR} into ${prefix}"
  ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} --config ${CONFIG})

run_step("configure the consumer"
  ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${consumer_build}
    -G ${GENERATOR}
    -D CMAKE_CXX_COMPILER=${CXX_COMPILER}
    -D CMAKE_BUILD_TYPE=${CONFIG}
    -D CMAKE_PREFIX_PATH=${prefix}
    -D CMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
string(FIND "${step_output}" "typeflow_DIR=${prefix}/" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the consumer did not find typeflow under ${prefix}:\n${step_output}")
endif()
message("-- the consumer found typeflow in ${prefix}")
# This typeflow was built with MPI (it requires it), so MPI is here too.
string(FIND "${step_output}" "typeflow::mpi: found" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the consumer did not get typeflow::mpi although MPI is installed:\n${step_output}")
endif()

run_step("build the consumer"
  ${CMAKE_COMMAND} --build ${consumer_build} --config ${CONFIG})

# Single-config generators put the binary in the build dir, multi-config ones
# in a per-config subdir.
foreach(name typeflow_consumer typeflow_mpi_consumer)
  set(consumer ${consumer_build}/${name})
  if(NOT EXISTS ${consumer})
    set(consumer ${consumer_build}/${CONFIG}/${name})
  endif()
  run_step("run ${name}" ${consumer})
  message("${step_output}")
endforeach()
message("-- the installed typeflow works from another project")

run_step("configure the consumer with MPI hidden"
  ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${no_mpi_build}
    -G ${GENERATOR}
    -D CMAKE_CXX_COMPILER=${CXX_COMPILER}
    -D CMAKE_BUILD_TYPE=${CONFIG}
    -D CMAKE_PREFIX_PATH=${prefix}
    -D CMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
    -D CMAKE_DISABLE_FIND_PACKAGE_MPI=ON)
string(FIND "${step_output}" "typeflow::mpi: not found" at)
if(at EQUAL -1)
  message(FATAL_ERROR "with MPI hidden, the consumer still got typeflow::mpi:\n${step_output}")
endif()
message("-- without MPI the package gives typeflow::typeflow alone")
