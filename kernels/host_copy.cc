#include "kernels/host_copy.h"

#include <algorithm>
#include <cstring>

#include "kernels/streaming_copy.h"

namespace statecache {
namespace {

// Share boundaries inside a descriptor fall on a multiple of this many bytes
// from its start: whole cache lines when the destination is line-aligned (a
// slot or a page-sized piece is), so two threads rarely write one line.
constexpr uint64_t kShareGranule = 64;

void Copy(bool streaming, char* dst, const char* src, uint64_t bytes) {
  if (streaming) {
    StreamingCopy(dst, src, bytes);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

}  // namespace

HostCopier::HostCopier(HostCopierOptions options) : options_(options) {
  for (int i = 1; i < options_.num_threads; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

HostCopier::~HostCopier() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

void HostCopier::CopyShare(const Job& job, int share) {
  const Cursor begin = job.bounds[share];
  const Cursor end = job.bounds[share + 1];
  for (size_t i = begin.index; i <= end.index && i < job.table.size(); ++i) {
    const CopyDescriptor& d = job.table[i];
    const uint64_t from = i == begin.index ? begin.offset : 0;
    const uint64_t to = i == end.index ? end.offset : d.bytes;
    if (to > from) {
      Copy(job.streaming, job.dst + d.dst_offset + from,
           job.src + d.src_offset + from, to - from);
    }
  }
  // Streaming stores are weakly ordered: drain them before the share is
  // reported done.
  if (job.streaming) StreamingFence();
}

void HostCopier::TakeShares(const Job& job) {
  while (true) {
    int share;
    {
      // `job` is only read once it is known to be the live job: a worker
      // that woke late may hold the address of one that already finished.
      absl::MutexLock lock(&mu_);
      if (job_ != &job) return;
      if (next_share_ >= static_cast<int>(job.bounds.size()) - 1) return;
      share = next_share_++;
    }
    CopyShare(job, share);
    absl::MutexLock lock(&mu_);
    ++shares_done_;
  }
}

void HostCopier::WorkerLoop() {
  uint64_t seen = 0;
  while (true) {
    const Job* job;
    {
      absl::MutexLock lock(&mu_);
      const auto ready = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || (job_ != nullptr && generation_ != seen);
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      seen = generation_;
      job = job_;
    }
    TakeShares(*job);
  }
}

void HostCopier::Run(absl::Span<const CopyDescriptor> table,
                     const void* src_base, void* dst_base) {
  uint64_t total = 0;
  for (const CopyDescriptor& d : table) total += d.bytes;
  const char* src = static_cast<const char*>(src_base);
  char* dst = static_cast<char*>(dst_base);

  uint64_t threads = 1;
  if (total >= options_.inline_bytes && options_.num_threads > 1) {
    threads = std::clamp<uint64_t>(
        total / std::max<uint64_t>(options_.min_share_bytes, 1), 1,
        static_cast<uint64_t>(options_.num_threads));
  }
  const bool streaming = total >= options_.streaming_bytes;
  if (threads == 1) {
    for (const CopyDescriptor& d : table) {
      Copy(streaming, dst + d.dst_offset, src + d.src_offset, d.bytes);
    }
    if (streaming) StreamingFence();
    return;
  }

  absl::MutexLock run_lock(&run_mu_);
  Job job;
  job.table = table;
  job.src = src;
  job.dst = dst;
  job.streaming = streaming;
  // One pass over the table places every share boundary: boundary k is at
  // byte k * total / threads of the stream, rounded down to the granule
  // within its descriptor.
  job.bounds.resize(threads + 1);
  job.bounds[threads] = {table.size(), 0};
  uint64_t stream = 0;  // stream position of descriptor i's first byte
  size_t i = 0;
  for (uint64_t k = 1; k < threads; ++k) {
    const uint64_t target = total / threads * k;
    while (stream + table[i].bytes <= target) stream += table[i++].bytes;
    uint64_t offset = (target - stream) / kShareGranule * kShareGranule;
    job.bounds[k] = {i, offset};
  }
  job.bounds[0] = {0, 0};

  {
    absl::MutexLock lock(&mu_);
    job_ = &job;
    next_share_ = 0;
    shares_done_ = 0;
    ++generation_;
  }
  TakeShares(job);
  absl::MutexLock lock(&mu_);
  const int shares = static_cast<int>(threads);
  const auto all_done = [this, shares]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shares_done_ == shares;
  };
  mu_.Await(absl::Condition(&all_done));
  job_ = nullptr;
}

}  // namespace statecache
