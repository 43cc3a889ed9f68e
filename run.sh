#!/bin/sh
# Installs what the daemon needs (apt, quiet when nothing is missing), builds
# statecached and statecachectl, and runs statecached on its defaults. Every
# argument reaches the daemon exactly as given (./run.sh --num_slots=4096).
set -eu
cd "$(dirname "$0")"
# install-deps is plain sh: it puts make itself on a machine without it.
.ci/install-deps run
make -s daemon
exec build/bin/statecached "$@"
