// The passes the RPC benchmarks send: a scheduler's pass of a given number
// of realistic operations, built as a list of operations, in columns (the
// packed form) or through the client library's StepBuilder; and the check
// that a steady-state pass was served, not refused.
#ifndef STATECACHE_BENCH_RPC_PASSES_H_
#define STATECACHE_BENCH_RPC_PASSES_H_

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "client/statecache_client.h"
#include "proto/statecache/v1/statecache.grpc.pb.h"

namespace statecache::bench {

// The benchmarks' model: its hash block size and the pool's size.
inline constexpr int64_t kBlock = 64;
inline constexpr int kSlots = 4096;

// A scheduler of its own session. A pass of `ops` operations looks like a
// real one: begin_pass; a few admissions (each a new turn of a
// conversation, resuming the earlier turns' prefix); for every running
// request, the fork its last forward consumed and a checkpoint at the block
// boundary it has just decoded past; and as many releases as admissions, so
// the running batch (about ops/2 requests) and the pool stay in a steady
// state. The same seed makes the same passes.
class Scheduler {
 public:
  Scheduler(std::string session, int ops, uint64_t seed)
      : session_(std::move(session)), ops_(ops), rng_(seed) {
    admits_ = std::max(1, ops_ / 32);
    batch_ = std::max(0, (ops_ - 1 - 2 * admits_) / 2);
  }

  const std::string& session() const { return session_; }

  // The next pass, as a list of operations or (`packed`) in columns, as a
  // scheduler using that form builds it.
  v1::StepRequest NextPass(bool packed = false);
  // The next pass through the C++ client library's StepBuilder.
  StepBuilder NextBuilder();

 private:
  // BuildPass's output as the list form.
  struct ListPassWriter;
  struct Conversation {
    std::vector<int64_t> hashes;
  };
  struct Running {
    std::string id;
    size_t conv;
  };

  // The pass's operations, written through `out`: anything with the
  // StepBuilder's methods for the kinds used here and size().
  template <typename Out>
  void BuildPass(Out& out);

  std::string session_;
  int ops_;
  int admits_ = 1;
  int batch_ = 0;
  std::mt19937_64 rng_;
  std::vector<Conversation> convs_ = std::vector<Conversation>(256);
  std::vector<Running> running_;
  uint64_t next_id_ = 0;
};

// A session of the benchmarks' model on `stub`; exits 1 if refused.
std::string Attach(v1::StateCache::Stub& stub);
// Ends a measurement's session so its requests do not fill the pool for
// the next one.
void Detach(v1::StateCache::Stub& stub, const std::string& session);

// Counts the refusals in a response other than RESOURCE_EXHAUSTED: a
// steady-state pass should never see one, and a benchmark of refused work
// would flatter the daemon. Thread-safe.
void CheckStep(const v1::StepResponse& resp);
// Prints a WARNING line with the count and the first refusal, if any was
// counted; returns whether one was.
bool ReportRefusals();

}  // namespace statecache::bench

#endif  // STATECACHE_BENCH_RPC_PASSES_H_
