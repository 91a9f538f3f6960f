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
cmake_minimum_required(VERSION 3.22)

foreach(var COMPILER SOURCE FLAGS_FILE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_compile_fail.cmake: -D ${var}=... is required")
  endif()
endforeach()
include(${FLAGS_FILE})

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

list(REMOVE_DUPLICATES COMPILE_FAIL_INCLUDE_DIRS)
# A .cu file is compiled by nvcc (COMPILER), for the CUDA backend's rules; it
# has no -fsyntax-only, so it compiles to an object that is thrown away.
get_filename_component(extension ${SOURCE} LAST_EXT)
if(extension STREQUAL ".cu")
  set(arguments -std=c++20 --expt-relaxed-constexpr -diag-suppress=445,186,1675 -arch=sm_90 -c -o /dev/null)
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
