// GpuCopier: runs copy tables on a GPU with the batched copy kernel: cuts the
// table into kernel-sized chunks (SplitCopyTable), uploads it through a
// pinned staging buffer into a device buffer it keeps (both grow as needed),
// and launches the kernel once. The GPU twin of HostCopier.
//
// Built only in GPU flavours (STATECACHE_GPU_HIP / STATECACHE_GPU_CUDA).
//
// Thread-safety: thread-compatible (the owner serialises calls; the staging
// buffers are reused from call to call).
#ifndef STATECACHE_KERNELS_GPU_COPIER_H_
#define STATECACHE_KERNELS_GPU_COPIER_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/copy_descriptor.h"
#include "kernels/gpu_runtime.h"

namespace statecache {

// A failed runtime call as a Status: INTERNAL "<what>: <runtime message>".
absl::Status GpuError(const char* what, hipError_t err);

class GpuCopier {
 public:
  // For the current device of the calling thread (hipSetDevice first).
  // Errors: INTERNAL if the device cannot be queried.
  static absl::StatusOr<std::unique_ptr<GpuCopier>> Create();
  ~GpuCopier();
  GpuCopier(const GpuCopier&) = delete;
  GpuCopier& operator=(const GpuCopier&) = delete;

  // Uploads `table` (split into chunks) for the next Launch calls, and
  // waits until the upload is done.
  absl::Status Prepare(absl::Span<const CopyDescriptor> table,
                       hipStream_t stream);
  // Enqueues one kernel launch of the prepared table on `stream`.
  absl::Status Launch(const void* src_base, void* dst_base, hipStream_t stream);
  // Prepare, Launch, and wait for the stream: the bytes are in place when it
  // returns OK.
  // REQUIRES (all three): the table's ranges inside the buffers, destinations
  // disjoint from each other and from every source.
  absl::Status Run(absl::Span<const CopyDescriptor> table, const void* src_base,
                   void* dst_base, hipStream_t stream);

  // Descriptors of the prepared table, after splitting.
  int64_t prepared_descriptors() const { return prepared_; }
  int max_blocks() const { return max_blocks_; }

 private:
  GpuCopier() = default;
  absl::Status Reserve(size_t descriptors);
  // Splits and enqueues the table's upload; the staging buffer is busy
  // until the stream passes it.
  absl::Status Upload(absl::Span<const CopyDescriptor> table,
                      hipStream_t stream);

  int max_blocks_ = 0;
  CopyDescriptor* staging_ = nullptr;  // pinned host memory
  CopyDescriptor* device_table_ = nullptr;
  size_t capacity_ = 0;  // descriptors either buffer holds
  int64_t prepared_ = 0;
};

}  // namespace statecache

#endif  // STATECACHE_KERNELS_GPU_COPIER_H_
