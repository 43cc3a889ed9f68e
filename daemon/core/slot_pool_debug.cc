// SlotPool: the whole observable state (Dump) and its invariants, for
// tests, fuzzers and the parity traces.
#include <algorithm>
#include <limits>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/core/pool_call.h"
#include "daemon/core/slot_pool.h"
#include "daemon/core/slot_pool_observed.h"
#include "daemon/core/slot_sort.h"

namespace statecache {

// ---------------------------------------------------------------- debugging

PoolSnapshot SlotPool::Dump() const {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    return Observed(PoolCall{.op = PoolOp::kDump}, [&] { return Dump(); });
  }
  PoolSnapshot snap;
  snap.num_slots = num_slots_;
  snap.slot_hash.reserve(slots_.size());
  for (int64_t s = 0; s < capacity(); ++s) {
    if (Is(s, kFree)) snap.free.push_back(s);
    if (Is(s, kSpeculative)) snap.speculative.push_back(s);
    if (Is(s, kDeferred)) snap.deferred.push_back(s);
    if (slots_[s].pins > 0) snap.pinned.emplace_back(s, slots_[s].pins);
    snap.slot_hash.push_back(slots_[s].hash);
  }
  snap.checkpointed = checkpointed_.ToVector(slots_);
  hash_to_slot_.ForEach([&snap](int64_t hash, int64_t slot) {
    snap.hash_to_slot.emplace_back(hash, slot);
  });
  std::sort(snap.hash_to_slot.begin(), snap.hash_to_slot.end());
  snap.relocations = relocations_;
  snap.fates = fates_;
  return snap;
}

// One list of invariants, each checked in turn; longer than most functions
// because the list is the idea.
absl::Status SlotPool::CheckInvariants() const {
  auto fail = [](auto&&... parts) {
    return absl::InternalError(absl::StrCat("invariant: ", parts...));
  };
  int64_t free_count = 0;
  int64_t vacant_count = 0;
  int64_t held_count = 0;
  int64_t pinned_count = 0;
  for (int64_t s = 0; s < capacity(); ++s) {
    const SlotState& st = slots_[s];
    const bool in_range = s < num_slots_;
    const bool is_free = Is(s, kFree);
    const bool hashed = st.hash != -1;
    if (is_free && !in_range) return fail("slot ", s, " free above num_slots");
    free_count += is_free;
    // Exactly one of live / free-vacant / free-checkpointed, and the
    // containers agree with it.
    const bool in_vacant = vacant_.Contains(s);
    const bool in_lru = Is(s, kInLru);
    if (in_vacant != (is_free && !hashed)) {
      return fail("slot ", s, " vacant-set membership ", in_vacant,
                  " but free=", is_free, " hash=", st.hash);
    }
    if (in_lru != (is_free && hashed)) {
      return fail("slot ", s, " LRU membership ", in_lru, " but free=", is_free,
                  " hash=", st.hash);
    }
    vacant_count += in_vacant;
    held_count += in_lru;
    if (hashed) {
      if (hash_to_slot_.Find(st.hash) != s) {
        return fail("slot_hash[", s, "]=", st.hash,
                    " not mirrored in hash_to_slot");
      }
    }
    if (st.pins < 0) return fail("slot ", s, " has ", st.pins, " pins");
    if (st.pins > 0) {
      ++pinned_count;
      if (is_free) return fail("pinned slot ", s, " is free");
      if (!in_range) return fail("pinned slot ", s, " is retired");
      if (st.pinned_pos < 0 ||
          st.pinned_pos >= static_cast<int32_t>(pinned_.size()) ||
          pinned_[st.pinned_pos] != s) {
        return fail("pinned slot ", s, " missing from the pinned list");
      }
    }
    if (Is(s, kDeferred) && st.pins == 0) {
      return fail("deferred slot ", s, " is not pinned");
    }
    if (Is(s, kReserved) && (is_free || !in_range)) {
      return fail("reserved slot ", s, " is free or retired");
    }
  }
  // The only entries allowed not to mirror are those Extend detached from a
  // re-used index (see the header); the index still exists.
  int64_t bad_hash = 0, bad_slot = 0;
  bool entries_in_range = true;
  hash_to_slot_.ForEach([&](int64_t hash, int64_t slot) {
    if (entries_in_range && (hash < 0 || slot < 0 || slot >= capacity())) {
      entries_in_range = false;
      bad_hash = hash;
      bad_slot = slot;
    }
  });
  if (!entries_in_range) {
    return fail("hash_to_slot entry ", bad_hash, "->", bad_slot,
                " out of range");
  }
  if (pinned_count != static_cast<int64_t>(pinned_.size())) {
    return fail("pinned list holds ", pinned_.size(), " slots, ", pinned_count,
                " are pinned");
  }
  if (free_count != num_free_) {
    return fail("num_free ", num_free_, " but ", free_count, " free slots");
  }
  if (vacant_count != vacant_.size() || held_count != checkpointed_.size()) {
    return fail("container sizes disagree with membership");
  }
  const std::vector<int64_t> lru = checkpointed_.ToVector(slots_);
  if (static_cast<int64_t>(lru.size()) != checkpointed_.size()) {
    return fail("LRU list length ", lru.size(), " != size ",
                checkpointed_.size());
  }
  for (int64_t s : lru) {
    if (!Is(s, kInLru)) return fail("LRU links reach slot ", s, " not in it");
  }
  return absl::OkStatus();
}

}  // namespace statecache
