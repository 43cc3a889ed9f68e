# What this configure leaves out, and why, collected in one place.
#
#   statecache_not_run(<what> <why>)
#       Records that <what> (a flavour, a group of tests) is not built or not
#       registered, because of <why>, and says so on the configure output.
#   statecache_write_not_run(<file>)
#       Writes every record as "<what>: <why>" lines (an empty file when
#       nothing was left out). The test summary (tests/run_suite.py) prints
#       it, so a green run says what it did not cover.
function(statecache_not_run what why)
  message(STATUS "statecache: not run: ${what} (${why})")
  set_property(GLOBAL APPEND PROPERTY STATECACHE_NOT_RUN "${what}: ${why}")
endfunction()

function(statecache_write_not_run file)
  get_property(records GLOBAL PROPERTY STATECACHE_NOT_RUN)
  list(JOIN records "\n" text)
  if(text)
    string(APPEND text "\n")
  endif()
  file(WRITE "${file}" "${text}")
endfunction()
