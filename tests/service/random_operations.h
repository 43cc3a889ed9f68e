// For the core's randomized tests and fuzzers: random Step operations of
// every kind, with arguments mostly from small domains (so requests, hashes
// and slots collide and interact) and sometimes out of range (so every
// refusal is reached); and what a client or operator can see of the daemon,
// to check that a refusal changed none of it (nor anything behind it). No test
// framework here (the fuzzers use it too); cache_with_memory.h has the tests'
// StateCache.
#ifndef STATECACHE_TESTS_SERVICE_RANDOM_OPERATIONS_H_
#define STATECACHE_TESTS_SERVICE_RANDOM_OPERATIONS_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/service/state_cache.h"
#include "proto/statecache/v1/statecache.pb.h"

namespace statecache {

// The hash block size the randomized tests attach with.
constexpr int64_t kBlock = 64;

// Draws operations and their arguments: from a seeded generator
// (deterministic for a seed), or from `next`, e.g. a fuzzer's bytes.
class Draw {
 public:
  explicit Draw(uint64_t seed)
      : next_([rng = std::mt19937_64(seed)]() mutable { return rng(); }) {}
  explicit Draw(std::function<uint64_t()> next) : next_(std::move(next)) {}

  bool Chance(int percent) { return Below(100) < percent; }
  int64_t Below(int64_t n) { return static_cast<int64_t>(next_() % n); }
  int64_t Pick(std::initializer_list<int64_t> values) {
    return *(values.begin() + Below(static_cast<int64_t>(values.size())));
  }
  std::string RequestId() {
    if (Chance(2)) return "";
    if (Chance(1)) return std::string(300, 'x');
    return absl::StrCat("r", Below(5));
  }
  int64_t Hash() {
    if (Chance(4)) return -1;
    if (Chance(2)) return std::numeric_limits<int64_t>::max();
    return Below(16);
  }
  int64_t Position() { return Chance(8) ? -kBlock : Below(6) * kBlock; }
  void Hashes(google::protobuf::RepeatedField<int64_t>* out) {
    for (int64_t n = Below(7); n > 0; --n) out->Add(Hash());
  }

  void Operation(v1::Operation* op) {
    switch (Below(15)) {
      case 0:
        op->mutable_begin_pass();
        break;
      case 1:
      case 2:
      case 3: {
        v1::Admit* a = op->mutable_admit();
        a->set_request_id(RequestId());
        a->set_width(Pick({-1, 0, 1, 1, 1, 2, 3, 1000}));
        a->set_num_tokens(Chance(3) ? -5 : Below(400));
        a->set_anchor_pos(Position());
        Hashes(a->mutable_block_hashes());
        a->set_kv_hit_blocks(static_cast<int32_t>(Below(9) - 1));
        break;
      }
      case 4:
      case 5: {
        v1::Checkpoint* c = op->mutable_checkpoint();
        c->set_request_id(RequestId());
        c->set_boundary_blocks(Below(8) - 1);
        c->set_hash(Hash());
        c->set_anchor_pos(Chance(40) ? 0 : Position());
        break;
      }
      case 6:
        op->mutable_release()->set_request_id(RequestId());
        break;
      case 7:
        op->mutable_consume_fork()->set_request_id(RequestId());
        break;
      case 8:
        op->mutable_adopt_fork_source()->set_request_id(RequestId());
        break;
      case 9: {
        v1::Reserve* r = op->mutable_reserve();
        r->set_request_id(RequestId());
        for (int64_t n = Below(4); n > 0; --n) {
          v1::MidstepPosition* p = r->add_positions();
          p->set_position(Position());
          p->set_hash(Hash());
        }
        break;
      }
      case 10:
        if (Chance(60)) {
          op->mutable_publish()->set_request_id(RequestId());
        } else {
          op->mutable_cancel()->set_request_id(RequestId());
        }
        break;
      case 11: {
        if (Chance(50)) {
          v1::ResumableHit* q = op->mutable_resumable_hit();
          q->set_num_tokens(Chance(3) ? -5 : Below(400));
          Hashes(q->mutable_block_hashes());
          q->set_kv_hit_blocks(static_cast<int32_t>(Below(9) - 1));
        } else {
          op->mutable_lookup()->set_hash(Hash());
        }
        break;
      }
      case 12:
        if (Chance(95)) {
          Hashes(op->mutable_unindex()->mutable_hashes());
        } else {
          op->mutable_clear_index();
        }
        break;
      case 13: {
        v1::Copy* c = op->mutable_copy();
        c->set_request_id(RequestId());
        c->set_from_index(static_cast<int32_t>(Below(5) - 1));
        c->set_to_index(static_cast<int32_t>(Below(5) - 1));
        break;
      }
      case 14: {
        v1::Snapshot* s = op->mutable_snapshot();
        s->set_request_id(RequestId());
        s->set_position(Position());
        s->set_hash(Hash());
        break;
      }
    }
  }

 private:
  std::function<uint64_t()> next_;
};

// What a client or operator can see of the daemon, less what a step renews
// or time moves (leases, uptime), and everything behind it that a later
// call would act on (StateCache::DebugDump: the pool's whole dump, so a
// refusal that reorders the LRU or re-files a hash without changing a count
// shows, and each session's requests and pins).
// Without `channel_counts`, the step channels' counts are left out: the
// channels' heartbeat thread changes them on its own time.
inline std::string Visible(StateCache& cache, bool channel_counts = true) {
  v1::GetStatsResponse stats;
  cache.GetStats(&stats);
  stats.clear_uptime_seconds();
  if (!channel_counts) {
    stats.clear_step_channels_open();
    stats.clear_step_channels_opened();
  }
  v1::ListSessionsRequest list;
  list.set_page_size(1000);
  v1::ListSessionsResponse sessions;
  std::string out = stats.ShortDebugString();
  if (absl::Status st = cache.ListSessions(list, &sessions); !st.ok()) {
    absl::StrAppend(&out, " | ListSessions: ", st.ToString());
  }
  for (const v1::SessionInfo& s : sessions.sessions()) {
    absl::StrAppend(&out, " | ", s.handle(), " requests=", s.requests(),
                    " slots=", s.slots(), " pins=", s.pins());
  }
  absl::StrAppend(&out, "\n", cache.DebugDump());
  return out;
}

// A model identity for a test's cache and its sessions.
inline v1::Identity TestIdentity(const std::string& model_id) {
  v1::Identity id;
  id.set_model_id(model_id);
  id.set_hash_block_size(kBlock);
  return id;
}

}  // namespace statecache

#endif  // STATECACHE_TESTS_SERVICE_RANDOM_OPERATIONS_H_
