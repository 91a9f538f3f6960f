# cmake -P script behind the compile_fail.<stem> tests.
#
#   cmake -D COMPILER=<c++> -D SOURCE=<file.cpp> -D FLAGS_FILE=<flags.cmake>
#         -P check_compile_fail.cmake
#
# SOURCE holds one or more lines "// expected-error: <text>". The test passes
# only if compiling SOURCE (-std=c++20 -fsyntax-only, with typeflow::typeflow's
# include dirs and definitions from FLAGS_FILE; a .cu file with nvcc) FAILS and the compiler's output
# contains every <text> as a plain substring. It always reports how many lines
# the compiler printed: a readable error is a short one.
#
# With -D PCH=<dir>/typeflow_pch.hpp, a .cpp SOURCE that includes
# <typeflow/typeflow.hpp> is compiled with that header precompiled, where
# <PCH>.gch exists: parsing typeflow.hpp was 6.3 of a test's 6.5 s (g++ 12,
# 2026-12-03). The diagnostics are the same; without the .gch, or with one g++
# finds invalid, it parses the header as before. The .gch is made by
#
#   cmake -D COMPILER=<c++> -D FLAGS_FILE=<flags.cmake> -D PCH_OUTPUT=<dir>/typeflow_pch.hpp
#         -P check_compile_fail.cmake
#
# with the same flags (ctest: compile_fail.precompiled_header, a fixture).
cmake_minimum_required(VERSION 3.22)

set(required COMPILER FLAGS_FILE)
if(NOT DEFINED PCH_OUTPUT)
  list(APPEND required SOURCE)
endif()
foreach(var IN LISTS required)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_compile_fail.cmake: -D ${var}=... is required")
  endif()
endforeach()
include(${FLAGS_FILE})

# The flags: typeflow::typeflow's include dirs, definitions and OpenMP.
list(REMOVE_DUPLICATES COMPILE_FAIL_INCLUDE_DIRS)
# A .cu file is compiled by nvcc (COMPILER), for the CUDA backend's rules; it
# has no -fsyntax-only, so it compiles to an object that is thrown away.
set(extension .cpp)
if(DEFINED SOURCE)
  get_filename_component(extension ${SOURCE} LAST_EXT)
endif()
if(extension STREQUAL ".cu")
  set(arguments -std=c++20 --expt-relaxed-constexpr -diag-suppress=445,186,1675 -arch=sm_90 -c -o /dev/null)
elseif(DEFINED PCH_OUTPUT)
  set(arguments -std=c++20 -fdiagnostics-color=never)
else()
  set(arguments -std=c++20 -fsyntax-only -fdiagnostics-color=never)
endif()
foreach(dir IN LISTS COMPILE_FAIL_INCLUDE_DIRS)
  list(APPEND arguments "-I${dir}")
endforeach()
foreach(definition IN LISTS COMPILE_FAIL_DEFINITIONS)
  if(NOT definition STREQUAL "")
    list(APPEND arguments "-D${definition}")
  endif()
endforeach()
separate_arguments(options UNIX_COMMAND "${COMPILE_FAIL_OPTIONS}")
if(extension STREQUAL ".cu")
  list(TRANSFORM options PREPEND "-Xcompiler=")
endif()
list(APPEND arguments ${options})

# Plain ASCII quotes in diagnostics, whatever the caller's locale.
set(ENV{LC_ALL} C)

if(DEFINED PCH_OUTPUT)
  file(WRITE ${PCH_OUTPUT} "#include <typeflow/typeflow.hpp>\n")
  file(REMOVE ${PCH_OUTPUT}.gch)
  execute_process(
    COMMAND ${COMPILER} ${arguments} -x c++-header ${PCH_OUTPUT} -o ${PCH_OUTPUT}.gch
    RESULT_VARIABLE result
    OUTPUT_VARIABLE output
    ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    file(REMOVE ${PCH_OUTPUT}.gch)
    message(FATAL_ERROR "precompiling typeflow.hpp for the compile-fail tests failed:\n${output}")
  endif()
  message("precompiled ${PCH_OUTPUT}.gch")
  return()
endif()

# The expected texts, read line by line (file(STRINGS) would split on ';').
file(READ ${SOURCE} source_text)
string(REPLACE "\r" "" source_text "${source_text}")
set(expected_texts "")
set(expected_count 0)
set(rest "${source_text}")
while(TRUE)
  string(FIND "${rest}" "// expected-error:" at)
  if(at EQUAL -1)
    break()
  endif()
  string(LENGTH "// expected-error:" marker_length)
  math(EXPR start "${at} + ${marker_length}")
  string(SUBSTRING "${rest}" ${start} -1 rest)
  string(FIND "${rest}" "\n" eol)
  string(SUBSTRING "${rest}" 0 ${eol} text)
  string(STRIP "${text}" text)
  if(text STREQUAL "")
    message(FATAL_ERROR "${SOURCE}: an '// expected-error:' line has no text after the colon")
  endif()
  math(EXPR expected_count "${expected_count} + 1")
  set(expected_text_${expected_count} "${text}")
endwhile()
if(expected_count EQUAL 0)
  message(FATAL_ERROR "${SOURCE}: no '// expected-error: <text>' line; every compile-fail test needs one")
endif()

if(DEFINED PCH AND EXISTS ${PCH}.gch AND NOT extension STREQUAL ".cu")
  string(FIND "${source_text}" "#include <typeflow/typeflow.hpp>" includes_all)
  if(NOT includes_all EQUAL -1)
    list(APPEND arguments -include ${PCH})
  endif()
endif()
execute_process(
  COMMAND ${COMPILER} ${arguments} ${SOURCE}
  RESULT_VARIABLE result
  OUTPUT_VARIABLE output
  ERROR_VARIABLE output)

string(REGEX MATCHALL "\n" newlines "${output}")
list(LENGTH newlines line_count)
if(NOT output STREQUAL "" AND NOT output MATCHES "\n$")
  math(EXPR line_count "${line_count} + 1")
endif()
get_filename_component(name ${SOURCE} NAME)
message("${name}: the compiler printed ${line_count} lines")

# Match against the diagnostics only, not the source lines g++ echoes under
# them ("    4 | static_assert(...)"), or a test would pass on its own text.
string(REGEX REPLACE "\n +[0-9]* \\|[^\n]*" "\n" diagnostics "\n${output}")
set(missing "")
foreach(i RANGE 1 ${expected_count})
  string(FIND "${diagnostics}" "${expected_text_${i}}" found)
  if(found EQUAL -1)
    string(APPEND missing "  ${expected_text_${i}}\n")
  endif()
endforeach()

# On failure the compiler's output is printed as it came (message(FATAL_ERROR)
# would re-wrap it), then the reason.
list(JOIN arguments " " command_line)
if(result EQUAL 0)
  message("Command: ${COMPILER} ${command_line} ${SOURCE}\nCompiler output:\n${output}")
  message(FATAL_ERROR "${name} compiled, but it must not.")
elseif(NOT missing STREQUAL "")
  message("Command: ${COMPILER} ${command_line} ${SOURCE}\nCompiler output:\n${output}")
  message(FATAL_ERROR "${name} failed to compile, but the output above lacks:\n${missing}")
endif()
message("${name}: fails to compile with the expected message")
