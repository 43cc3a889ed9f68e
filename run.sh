#!/bin/sh
# Installs what is missing (apt), builds, and runs statecached on its
# defaults; arguments go to the daemon (e.g. ./run.sh --num_slots=4096).
set -eu
cd "$(dirname "$0")"
exec make run ARGS="$*"
