#!/bin/bash
# tests/gpu/run.sh: on a GPU machine, builds the flavour the machine has (HIP
# for AMD, CUDA for NVIDIA), runs the GPU tests (which must pass, not skip)
# and the copy benchmark. Budget: under 8 minutes (typically 2-3).
#
#   tests/gpu/run.sh [BUILD_DIR]          build here and run (default build-gpu)
#   tests/gpu/run.sh --build-only [DIR]   build only (a machine with the
#                                         toolchain but no GPU)
#   tests/gpu/run.sh --prebuilt DIR       run DIR/bin's binaries with
#                                         DIR/lib on the library path (made
#                                         by tests/gpu/bundle.sh)
#
# Environment: GPU_FLAVOUR (hip or cuda; skips detection, as --build-only
# on a machine without the device needs), JOBS (default nproc), HIP_ARCH
# (default: the device's, else gfx90a), CUDA_ARCH (default: the device's
# compute capability, else 90), BENCH_ARGS (extra copy_bench flags).
# Configures with STATECACHE_CORE_ONLY=ON: the GPU parts need neither gRPC
# nor protobuf, so a bare GPU machine with the core's packages builds them.
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=build-and-run
case "${1:-}" in
  --build-only) mode=build-only; shift ;;
  --prebuilt) mode=prebuilt; shift ;;
esac
BUILD=${1:-build-gpu}
JOBS=${JOBS:-$(nproc)}
export PATH="$PATH:/usr/local/cuda/bin:/opt/rocm/bin"

flavour=${GPU_FLAVOUR:-}
if [ -n "$flavour" ]; then
  :
elif [ "$mode" = prebuilt ]; then
  for f in "$BUILD"/bin/statecache_gpu_tests_*; do flavour=${f##*_}; done
elif [ -e /dev/kfd ] && command -v hipcc >/dev/null 2>&1; then
  flavour=hip
elif { [ -e /dev/nvidiactl ] || command -v nvidia-smi >/dev/null 2>&1; } &&
  command -v nvcc >/dev/null 2>&1; then
  flavour=cuda
fi
if [ -z "$flavour" ]; then
  echo "run.sh: no GPU toolchain+device pair (AMD: /dev/kfd and hipcc;" \
    "NVIDIA: driver and nvcc)" >&2
  exit 2
fi

args=(-DCMAKE_BUILD_TYPE=Release -DSTATECACHE_CORE_ONLY=ON
  "-DSTATECACHE_DEVICE_GPU=$flavour")
if [ "$flavour" = hip ]; then
  arch=${HIP_ARCH:-$(rocm_agent_enumerator 2>/dev/null | grep -v gfx000 |
    head -1 || true)}
  args+=(-DSTATECACHE_WITH_HIP=ON -DSTATECACHE_WITH_CUDA=OFF
    "-DSTATECACHE_HIP_ARCH=${arch:-gfx90a}")
else
  cap=${CUDA_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader \
    2>/dev/null | head -1 | tr -d ' .' || true)}
  args+=(-DSTATECACHE_WITH_HIP=OFF -DSTATECACHE_WITH_CUDA=ON
    -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" "-DSTATECACHE_CUDA_ARCH=${cap:-90}")
fi

if [ "$mode" = prebuilt ]; then
  lib_dir=$(cd "$BUILD/lib" && pwd)
  export LD_LIBRARY_PATH="$lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "== prebuilt ($flavour) from $BUILD"
else
  echo "== configure ($flavour): ${args[*]}"
  cmake -S . -B "$BUILD" -G Ninja "${args[@]}" >/dev/null
  echo "== build"
  cmake --build "$BUILD" -j "$JOBS" --target "statecache_gpu_tests_$flavour" \
    copy_bench statecache_device_tests statecache_region_probe
  [ "$mode" = build-only ] && exit 0
fi

set +e  # from here on, run everything and report the worst status
echo "== GPU tests ($flavour)"
log=$(mktemp)
timeout 300 "$BUILD/bin/statecache_gpu_tests_$flavour" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
# IpcChild skips by design (it is the other process of the IPC test); any
# other skip means the runtime saw no device.
if grep -E '^\[  SKIPPED \] [A-Za-z]' "$log" |
  grep -v -e 'IpcChild' -e 'listed below' | grep -q .; then
  echo "run.sh: GPU tests skipped: the $flavour runtime sees no device" >&2
  status=1
fi
rm -f "$log"

echo "== host device tests"
timeout 120 "$BUILD/bin/statecache_device_tests" --gtest_brief=1 || status=1

echo "== copy_bench"
# BENCH_ARGS is a list of flags: split on purpose.
# shellcheck disable=SC2086
timeout 240 "$BUILD/bin/copy_bench" --reps 5 ${BENCH_ARGS:-} || status=1
exit "$status"
