# How much of CI's two cores a test takes when tools/test.sh runs the ranked tests with
# ctest -j3: a test whose ranks mostly sleep through deadlines (label "waits") takes one
# slot, every other ranked test two. A waiting test then runs beside a busy one, and two
# busy ones never run together (their deadlines on two cores assume a machine of their own).
# Called at the end of each directory that adds tests (a test's properties are its directory's).
function(sncl_set_test_slots)
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(test IN LISTS tests)
    get_test_property(${test} LABELS labels)
    if(NOT labels)
      set(labels "")
    endif()
    if(NOT "unit" IN_LIST labels AND NOT "waits" IN_LIST labels)
      set_tests_properties(${test} PROPERTIES PROCESSORS 2)
    endif()
  endforeach()
endfunction()
