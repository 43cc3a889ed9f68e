#!/bin/sh
# Installs what is missing (apt), builds, and runs every test: the main
# suite, the core, daemon core and device layer under ASan+UBSan, and the
# pool and Step fuzzers. .ci/run runs exactly this.
set -eu
cd "$(dirname "$0")"
exec make test
