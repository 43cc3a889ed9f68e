// The batched copy kernel (see copy_kernel.h for the scheme). HIP source;
// built for NVIDIA by nvcc through kernels/gpu_runtime.h.
#include "kernels/copy_kernel.h"

namespace statecache {
namespace {

constexpr int kUnroll = 4;  // 16-byte loads in flight per thread

__global__ void __launch_bounds__(kCopyKernelThreads)
    CopyTableKernel(const CopyDescriptor* __restrict__ table, uint64_t count,
                    const char* __restrict__ src, char* __restrict__ dst) {
  constexpr uint64_t kThreads = kCopyKernelThreads;
  for (uint64_t i = blockIdx.x; i < count; i += gridDim.x) {
    const CopyDescriptor d = table[i];
    const char* __restrict__ from = src + d.src_offset;
    char* __restrict__ to = dst + d.dst_offset;
    uint64_t vectorised = 0;
    if (((reinterpret_cast<uintptr_t>(from) | reinterpret_cast<uintptr_t>(to)) &
         15) == 0) {
      const uint4* __restrict__ from4 = reinterpret_cast<const uint4*>(from);
      uint4* __restrict__ to4 = reinterpret_cast<uint4*>(to);
      const uint64_t n = d.bytes / 16;
      uint64_t j = threadIdx.x;
      // All loads of a round issue before its stores, so each thread keeps
      // kUnroll requests in flight.
      for (; j + (kUnroll - 1) * kThreads < n; j += kUnroll * kThreads) {
        uint4 v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) v[u] = from4[j + u * kThreads];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) to4[j + u * kThreads] = v[u];
      }
      for (; j < n; j += kThreads) to4[j] = from4[j];
      vectorised = n * 16;
    }
    for (uint64_t j = vectorised + threadIdx.x; j < d.bytes; j += kThreads) {
      to[j] = from[j];
    }
  }
}

}  // namespace

hipError_t LaunchCopyTable(const CopyDescriptor* device_table,
                           int64_t num_descriptors, const void* src_base,
                           void* dst_base, int max_blocks, hipStream_t stream) {
  if (num_descriptors <= 0) return hipSuccess;
  const int64_t blocks =
      num_descriptors < max_blocks ? num_descriptors : max_blocks;
  CopyTableKernel<<<static_cast<unsigned>(blocks), kCopyKernelThreads, 0,
                    stream>>>(
      device_table, static_cast<uint64_t>(num_descriptors),
      static_cast<const char*>(src_base), static_cast<char*>(dst_base));
  return hipGetLastError();
}

}  // namespace statecache
