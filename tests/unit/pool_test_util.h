// Helpers shared by the slot pool unit tests.
//
// `Must` unwraps a StatusOr (or checks a Status) and throws on error, so a
// set-up step the implementation wrongly refuses fails the one test (GoogleTest
// reports the exception) instead of aborting the whole binary.
//
// `DumpJson` renders a PoolSnapshot exactly as the reference's `run_trace.py`
// prints a `dump` result (keys sorted, no spaces), so expectations can be
// pasted from the reference's own output.
#ifndef STATECACHE_TESTS_UNIT_POOL_TEST_UTIL_H_
#define STATECACHE_TESTS_UNIT_POOL_TEST_UTIL_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/core/slot_pool.h"
#include "daemon/core/state_transfer.h"
#include "gtest/gtest.h"

namespace statecache {
namespace testing_util {

using V = std::vector<int64_t>;
using PV = std::vector<std::pair<int64_t, int64_t>>;

template <typename T>
T Must(absl::StatusOr<T> s, const char* what = "call") {
  if (!s.ok()) {
    throw std::runtime_error(std::string(what) +
                             " unexpectedly failed: " + s.status().ToString());
  }
  return std::move(s).value();
}

inline void Must(const absl::Status& s, const char* what = "call") {
  if (!s.ok()) {
    throw std::runtime_error(std::string(what) +
                             " unexpectedly failed: " + s.ToString());
  }
}

inline StateTransfer Fork(int64_t tokens = 1, bool readable_midstep = false) {
  return Must(
      StateTransfer::Create(TransferKind::kFork, tokens, readable_midstep),
      "StateTransfer::Create(fork)");
}
inline StateTransfer Replay(bool readable_midstep = false) {
  return Must(StateTransfer::Create(TransferKind::kReplay, 0, readable_midstep),
              "StateTransfer::Create(replay)");
}

inline SlotPool MakePool(int64_t num_slots, StateTransfer transfer,
                         int64_t hash_block_size = 64, bool enabled = true) {
  return Must(SlotPool::Create(num_slots, transfer, hash_block_size, enabled),
              "SlotPool::Create");
}

inline Sequence Seq(int64_t state_slot, int64_t num_tokens,
                    int64_t midstep_anchor_pos = 0,
                    int64_t checkpoint_end_pos = 0,
                    bool has_per_req_cache = true) {
  Sequence s;
  s.state_slot = state_slot;
  s.num_tokens = num_tokens;
  s.has_per_req_cache = has_per_req_cache;
  s.midstep_anchor_pos = midstep_anchor_pos;
  s.checkpoint_end_pos = checkpoint_end_pos;
  return s;
}

inline std::string JsonList(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(v[i]);
  }
  return out + "]";
}

inline std::string JsonPairs(
    const std::vector<std::pair<int64_t, int64_t>>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ",";
    out += "[" + std::to_string(v[i].first) + "," +
           std::to_string(v[i].second) + "]";
  }
  return out + "]";
}

// The reference's normalised `dump` (json.dumps(sort_keys=True)).
inline std::string SnapshotJson(const PoolSnapshot& s) {
  std::string o = "{";
  o += "\"checkpointed\":" + JsonList(s.checkpointed);
  o += ",\"checkpoints_dropped\":" + std::to_string(s.fates.dropped);
  o += ",\"checkpoints_evicted\":" + std::to_string(s.fates.evicted);
  o += ",\"checkpoints_kept\":" + std::to_string(s.fates.kept);
  o += ",\"checkpoints_orphaned\":" + std::to_string(s.fates.orphaned);
  o += ",\"deferred\":" + JsonList(s.deferred);
  o += ",\"free\":" + JsonList(s.free);
  o += ",\"hash_to_slot\":" + JsonPairs(s.hash_to_slot);
  o += ",\"num_slots\":" + std::to_string(s.num_slots);
  o += ",\"pinned\":" + JsonPairs(s.pinned);
  o += ",\"relocations\":" + JsonPairs(s.relocations);
  o += ",\"slot_hash\":" + JsonList(s.slot_hash);
  o += ",\"speculative\":" + JsonList(s.speculative);
  return o + "}";
}

inline std::string DumpJson(const SlotPool& pool) {
  return SnapshotJson(pool.Dump());
}

inline std::string Lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

}  // namespace testing_util

// GoogleTest printers (found by ADL), so failures show values, not bytes.
inline void PrintTo(const PoolSnapshot& s, std::ostream* os) {
  *os << testing_util::SnapshotJson(s);
}
inline void PrintTo(const SlotRetirement& r, std::ostream* os) {
  *os << "{retired=" << r.retired << ", relocated_to=" << r.relocated_to
      << ", held_checkpoint=" << (r.held_checkpoint ? "true" : "false") << "}";
}
inline void PrintTo(const CheckpointResult& r, std::ostream* os) {
  *os << "{state_slot=" << r.state_slot
      << ", state_fork_src=" << r.state_fork_src << "}";
}
inline void PrintTo(const CheckpointFates& f, std::ostream* os) {
  *os << "{kept=" << f.kept << ", dropped=" << f.dropped
      << ", evicted=" << f.evicted << ", orphaned=" << f.orphaned << "}";
}
inline void PrintTo(const Occupancy& o, std::ostream* os) {
  *os << "{total=" << o.total << ", used=" << o.used << ", held=" << o.held
      << ", vacant=" << o.vacant << "}";
}
inline void PrintTo(const Reservation& r, std::ostream* os) {
  *os << "{slot=" << r.slot << ", position=" << r.position
      << ", hash=" << r.hash << "}";
}

}  // namespace statecache

// Asserts the pool's structural invariants hold (call after every scenario).
#define EXPECT_INVARIANTS(pool)                            \
  do {                                                     \
    ::absl::Status _inv = (pool).CheckInvariants();        \
    ASSERT_TRUE(_inv.ok()) << "CheckInvariants: " << _inv; \
  } while (0)

// Asserts the whole observable state equals the reference's dump (as
// run_trace.py prints it).
#define EXPECT_DUMP(pool, json) \
  EXPECT_EQ(::statecache::testing_util::DumpJson(pool), std::string(json))

#endif  // STATECACHE_TESTS_UNIT_POOL_TEST_UTIL_H_
