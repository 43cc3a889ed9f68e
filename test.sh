#!/bin/sh
# Installs what the tests need (apt, quiet when nothing is missing), then runs
# every stage (tests/run_suite.py), each a workflow of CMakePresets.json that
# configures, builds and tests: the main suite; the core, daemon core and
# device layer under ASan+UBSan; the daemon core and its concurrent stress
# under ThreadSanitizer; the pool, Step and saved-state fuzzers. It ends with
# a summary of each stage and of what did not run. .ci/run runs exactly this.
# Arguments go to run_suite.py (--stages, --jobs, --fuzz-seconds, --dry-run);
# JOBS and FUZZ_SECONDS in the environment set the last two as well.
set -eu
cd "$(dirname "$0")"
# install-deps is plain sh: it puts Python and CMake on a machine without.
.ci/install-deps test
exec /usr/bin/python3 tests/run_suite.py "$@"
