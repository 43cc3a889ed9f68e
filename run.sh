#!/bin/sh
# Installs what the daemon needs (apt, quiet when nothing is missing), builds
# statecached and statecachectl (the `run` workflow of CMakePresets.json, in
# build/), and runs statecached on its defaults. Every argument reaches the
# daemon exactly as given (./run.sh --num_slots=4096).
set -eu
cd "$(dirname "$0")"
# install-deps is plain sh: it puts CMake itself on a machine without it.
.ci/install-deps run
# One compile job per CPU (JOBS to change it): Ninja's default runs more.
CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-$(nproc)} cmake --workflow --preset run
exec build/bin/statecached "$@"
