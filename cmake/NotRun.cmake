# What this configure leaves out, and why, collected in one place.
#
#   statecache_not_run(<what> <why>)
#       Records that <what> (a flavour, a group of tests) is not built or not
#       registered, because of <why>, and says so on the configure output.
#   statecache_write_not_run(<file>)
#       Writes every record as "<what>: <why>" lines (an empty file when
#       nothing was left out), and, when tests are registered, adds one test
#       per record, labelled not_run, that prints the record and reports
#       itself skipped: a plain `ctest` then ends by listing, under "The
#       following tests did not run", what it did not run and why (the test
#       names say both). tests/run_suite.py prints the file too.
function(statecache_not_run what why)
  message(STATUS "statecache: not run: ${what} (${why})")
  set_property(GLOBAL APPEND PROPERTY STATECACHE_NOT_RUN "${what}: ${why}")
endfunction()

function(statecache_write_not_run file register_tests)
  get_property(records GLOBAL PROPERTY STATECACHE_NOT_RUN)
  set(text "")
  foreach(record IN LISTS records)
    string(APPEND text "${record}\n")
    if(register_tests)
      # SKIP_RETURN_CODE: ctest lists it as "(Skipped)", not as passed.
      set(name "not run: ${record}")
      add_test(NAME "${name}"
               COMMAND sh -c "echo \"skipped: $1\"; exit 77" sh "${record}")
      set_tests_properties("${name}" PROPERTIES
        LABELS not_run SKIP_RETURN_CODE 77)
    endif()
  endforeach()
  file(WRITE "${file}" "${text}")
endfunction()
