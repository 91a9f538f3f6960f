# cmake -P script behind the install.plain_command test: a single-machine user
# needs no MPI.
#
#   cmake -D CXX_COMPILER=<g++> -D INCLUDE_DIR=<typeflow>/include
#         -D SOURCE=<tests/install_consumer/main.cpp> -D WORK_DIR=<scratch dir>
#         -P check_plain_command.cmake
#
# Compiles and links SOURCE, which includes <typeflow/typeflow.hpp> and trains
# one step, with the plain line a user would type:
#   g++ -std=c++20 -fopenmp -I <include> main.cpp -o <out> -ldnnl
# (no Open MPI include path or library; oneDNN is the only library the program
# needs besides the compiler's own), checks that no mpi.h was read (so the test
# means the same where one is on the default include path), and runs it.
cmake_minimum_required(VERSION 3.22)

foreach(var CXX_COMPILER INCLUDE_DIR SOURCE WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_plain_command.cmake: -D ${var}=... is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(program ${WORK_DIR}/plain_consumer)

set(command ${CXX_COMPILER} -std=c++20 -fopenmp -I ${INCLUDE_DIR} ${SOURCE} -o ${program} -ldnnl)
string(REPLACE ";" " " command_line "${command}")
message("-- ${command_line}")
string(TIMESTAMP start "%s")
execute_process(COMMAND ${command} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
string(TIMESTAMP end "%s")
math(EXPR seconds "${end} - ${start}")
if(NOT result EQUAL 0)
  message(FATAL_ERROR "the plain command failed (${result}) after ${seconds} s:\n${output}")
endif()
message("-- compiled and linked in ${seconds} s")

# The headers it read: -M lists every one, system headers included.
execute_process(COMMAND ${CXX_COMPILER} -std=c++20 -fopenmp -I ${INCLUDE_DIR} -M ${SOURCE}
  RESULT_VARIABLE result OUTPUT_VARIABLE dependencies ERROR_VARIABLE dependencies)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "listing the headers (-M) failed (${result}):\n${dependencies}")
endif()
if(dependencies MATCHES "[^ \n\\\\]*/mpi\\.h")
  message(FATAL_ERROR "typeflow/typeflow.hpp reads ${CMAKE_MATCH_0}: it must not need MPI")
endif()

execute_process(COMMAND ${program} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${program} failed (${result}):\n${output}")
endif()
message("${output}")
message("-- typeflow/typeflow.hpp compiles, links and trains without MPI")
