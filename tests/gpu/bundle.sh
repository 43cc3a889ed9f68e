#!/bin/bash
# tests/gpu/bundle.sh: packs the GPU test binaries of a build made HERE for a
# GPU machine that cannot build them (no Abseil or GoogleTest packages, no
# network): the binaries run.sh runs plus every shared library they load
# that is not the C library or the GPU driver, so they run on any newer
# glibc. Build first with tests/gpu/run.sh --build-only, then
#
#   tests/gpu/bundle.sh BUILD_DIR OUT_DIR     # OUT_DIR/bin, OUT_DIR/lib
#   (on the GPU machine) tests/gpu/run.sh --prebuilt OUT_DIR
set -euo pipefail
build=${1:?usage: bundle.sh BUILD_DIR OUT_DIR}
out=${2:?usage: bundle.sh BUILD_DIR OUT_DIR}
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for exe in "$build"/bin/statecache_gpu_tests_* "$build/bin/copy_bench" \
  "$build/bin/statecache_device_tests" "$build/bin/statecache_region_probe"; do
  cp "$exe" "$out/bin/"
  # glibc's own libraries and the driver stay: the GPU machine has its own.
  ldd "$exe" | awk '$3 ~ /^\// {print $3}' |
    grep -v -E '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libcuda|libamdhip64|libhsa-runtime64)\.so' |
    while read -r lib; do cp -Ln "$lib" "$out/lib/"; done
done
du -sh "$out"
