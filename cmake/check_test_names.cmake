# Fails when a doctest case's name holds a ';' or an unbalanced '[' or ']'.
# doctest_discover_tests splits the binary's listing into a CMake list: a ';'
# makes one case two ctest tests whose filters match no case, and both "pass"
# having run nothing; an unopened or unclosed bracket makes CMake keep the
# following lines in one list element (brackets protect ';'), so the listing
# after it becomes one test and ctest stops with "set_tests_properties unknown
# error".
#   cmake -D BINARIES="a;b" -P check_test_names.cmake   (BINARIES joined by '|')
string(REPLACE "|" ";" binaries "${BINARIES}")
set(bad "")
foreach(binary IN LISTS binaries)
  execute_process(COMMAND "${binary}" --list-test-cases OUTPUT_VARIABLE listed RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${binary} --list-test-cases failed (${result})")
  endif()
  # Stand-ins keep the three characters from acting on CMake's list split.
  string(REPLACE ";" "<semicolon>" listed "${listed}")
  string(REPLACE "[" "<open>" listed "${listed}")
  string(REPLACE "]" "<close>" listed "${listed}")
  string(REPLACE "\n" ";" lines "${listed}")
  foreach(line IN LISTS lines)
    # Remove innermost bracket pairs until none is left; what stays is unbalanced.
    set(rest "${line}")
    set(before "")
    while(NOT rest STREQUAL before)
      set(before "${rest}")
      string(REGEX REPLACE "<open>(([^<]|<[^oc])*)<close>" "\\1" rest "${rest}")
    endwhile()
    if(line MATCHES "<semicolon>" OR rest MATCHES "<open>|<close>")
      string(REPLACE "<semicolon>" ";" line "${line}")
      string(REPLACE "<open>" "[" line "${line}")
      string(REPLACE "<close>" "]" line "${line}")
      string(APPEND bad "\n  ${binary}: ${line}")
    endif()
  endforeach()
endforeach()
if(NOT bad STREQUAL "")
  message(FATAL_ERROR "test case names with a ';' or an unbalanced '[' or ']', which ctest's "
                      "discovery misreads (write ',' or 'and', and close each bracket):${bad}")
endif()
message(STATUS "no test case name holds a ';' or an unbalanced bracket")
