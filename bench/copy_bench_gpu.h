// copy_bench's GPU part (built when the build has a GPU flavour).
#ifndef STATECACHE_BENCH_COPY_BENCH_GPU_H_
#define STATECACHE_BENCH_COPY_BENCH_GPU_H_

#include <vector>

#include "bench/copy_bench_common.h"

namespace statecache {

// Prints one line per case: kernel vs one D2D memcpy of the same bytes vs one
// hipMemcpyAsync per piece. Says so and returns when no device is present.
void RunGpuCopyBench(const std::vector<BenchCase>& cases, int reps);

}  // namespace statecache

#endif  // STATECACHE_BENCH_COPY_BENCH_GPU_H_
