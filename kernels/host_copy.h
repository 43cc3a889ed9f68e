// HostCopier: the host twin of the GPU copy kernel. Runs a copy table with
// memcpy, the bytes of a large table shared across a small pool of threads.
//
// The table's bytes are cut into equal shares, one per thread in use, at
// 64-byte boundaries inside descriptors where needed: a table of one 300 MB
// slot and a table of ten thousand 4 KiB pieces are spread the same way, and
// every thread does one copy per descriptor (part) it owns, never one per
// piece of a layer when pieces were coalesced. Large tables are copied with
// non-temporal stores (streaming_copy.h), which matches one glibc memcpy of
// the same bytes where per-slot memcpy calls fall well short of it; small
// tables use memcpy. Tables below `inline_bytes`
// run entirely on the calling thread: waking a worker costs tens of
// microseconds, more than copying a few hundred KiB.
//
// The caller is one of the threads: num_threads = 4 means the caller plus
// three workers.
//
// Thread-safety: thread-safe. Concurrent Run calls are serialised (one table
// at a time uses the pool).
#ifndef STATECACHE_KERNELS_HOST_COPY_H_
#define STATECACHE_KERNELS_HOST_COPY_H_

#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "kernels/copy_descriptor.h"

namespace statecache {

struct HostCopierOptions {
  // Threads sharing one table, the caller included. 1 copies inline always.
  int num_threads = 4;
  // Tables with fewer bytes run on the caller alone.
  uint64_t inline_bytes = uint64_t{4} << 20;
  // No thread gets a share smaller than this (tables between inline_bytes
  // and num_threads * min_share use fewer threads).
  uint64_t min_share_bytes = uint64_t{2} << 20;
  // Tables with at least this many bytes are copied with non-temporal
  // stores (StreamingCopy): they do not fit in the caches anyway. Smaller
  // ones use memcpy and stay cache-resident for whoever reads them next.
  uint64_t streaming_bytes = uint64_t{8} << 20;
};

class HostCopier {
 public:
  // REQUIRES: options.num_threads >= 1.
  explicit HostCopier(HostCopierOptions options = {});
  ~HostCopier();  // joins the workers
  HostCopier(const HostCopier&) = delete;
  HostCopier& operator=(const HostCopier&) = delete;

  // For every descriptor d: memcpy(dst_base + d.dst_offset,
  // src_base + d.src_offset, d.bytes). Returns when every byte is copied.
  // src_base and dst_base may be the same region.
  // REQUIRES: every range lies inside its region; no destination range
  // overlaps another destination or any source range (BuildCopyTable
  // guarantees it; ValidateCopyTable checks a hand-made table): the bytes are
  // copied in parallel, in no particular order.
  void Run(absl::Span<const CopyDescriptor> table, const void* src_base,
           void* dst_base);

  const HostCopierOptions& options() const { return options_; }

 private:
  // A position in the table's byte stream: descriptor index and offset.
  struct Cursor {
    size_t index = 0;
    uint64_t offset = 0;
  };
  struct Job {
    absl::Span<const CopyDescriptor> table;
    const char* src = nullptr;
    char* dst = nullptr;
    std::vector<Cursor> bounds;  // share k is [bounds[k], bounds[k+1])
    bool streaming = false;      // StreamingCopy instead of memcpy
  };

  static void CopyShare(const Job& job, int share);
  // Takes shares of the current job until none is left.
  void TakeShares(const Job& job) ABSL_LOCKS_EXCLUDED(mu_);
  void WorkerLoop();

  const HostCopierOptions options_;
  absl::Mutex run_mu_;  // one Run at a time
  absl::Mutex mu_;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // bumped per pooled job
  const Job* job_ ABSL_GUARDED_BY(mu_) = nullptr;
  int next_share_ ABSL_GUARDED_BY(mu_) = 0;
  int shares_done_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace statecache

#endif  // STATECACHE_KERNELS_HOST_COPY_H_
