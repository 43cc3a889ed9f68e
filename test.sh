#!/bin/sh
# Installs what the tests need (apt, quiet when nothing is missing), builds,
# and runs every stage: the main suite, the core, daemon core and device layer
# under ASan+UBSan, the daemon core and its concurrent stress under
# ThreadSanitizer, and the pool and Step fuzzers; it ends with a summary of
# each stage and of what did not run. .ci/run runs exactly this.
set -eu
cd "$(dirname "$0")"
# install-deps is plain sh: it puts make (and Python) on a machine without.
.ci/install-deps test
exec make -s test
