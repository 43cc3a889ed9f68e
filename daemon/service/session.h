// Session and Request: the per-scheduler state the daemon keeps in place of
// the scheduler's own `seq` objects.
//
// Plain data, owned by StateCache (through SessionTable) and guarded by its
// mutex.
#ifndef STATECACHE_DAEMON_SERVICE_SESSION_H_
#define STATECACHE_DAEMON_SERVICE_SESSION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/time/time.h"
#include "daemon/core/placement_advice.h"
#include "daemon/core/slot_memory.h"
#include "daemon/core/slot_sort.h"
#include "daemon/service/peer.h"

namespace statecache {

struct Session;

// One admitted request: what it holds in the pool (SlotHolding: what the
// reference reads through `seq`), and whose it is.
struct Request : SlotHolding {
  std::string id;
  // Admission order within the daemon (releases on session end follow it).
  uint64_t seqno = 0;
  Session* session = nullptr;
  // The session's naming order (Session::NameNext): the requests named just
  // before and after this one when last they were named in turn. Null at
  // either end, and both null while the request is in no such order.
  Request* named_prev = nullptr;
  Request* named_next = nullptr;
  // Placement advice (an advised session; else all zero): what its admit
  // advised, and its current continuation checkpoint (the one a deeper
  // continuation replaces: hash and slot), or -1.
  PlacementAdvice advice;
  int64_t continuation_hash = -1;
  int64_t continuation_slot = -1;
};

// A fork-source slot this session pins: how many of the pool's pins on it
// are this session's (counted per session so that one scheduler's clock never
// frees a source another still reads), and which of its requests read it
// next (one or two in practice, hence the inline vector). Never more readers
// than pins: each reader came with a pin, and a reader leaves no later than
// its pin does.
struct SessionPin {
  int32_t count = 0;
  // Read by the batch the session's next pass builds: survives one tick.
  bool deferred = false;
  absl::InlinedVector<Request*, 2> readers;

  // No-op if `request` is not a reader.
  void RemoveReader(const Request* request) {
    for (size_t i = 0; i < readers.size(); ++i) {
      if (readers[i] == request) {
        readers[i] = readers.back();
        readers.pop_back();
        return;
      }
    }
  }
};

// A session's pins by slot. Flat rather than hashed: `index_` maps a slot
// to its entry's place in `entries_` (plus one; 0 for an unpinned slot), so
// a pass's finds, adds and drops cost no hashing or probing, and walking the
// pins walks one dense array. The entries are in no particular order (the
// clock and DebugDump sort them by slot). Erasing one moves the last entry
// into its place: iterators and pointers to entries other than the last
// stay valid; adding one may move them all. `index_` grows to the highest
// slot pinned so far (4 bytes a slot) and no further: pinned slots are
// never relocated or retired, so every entry names a slot in the pool.
class SessionPins {
 public:
  using value_type = std::pair<int64_t, SessionPin>;
  using iterator = std::vector<value_type>::iterator;
  using const_iterator = std::vector<value_type>::const_iterator;

  iterator begin() { return entries_.begin(); }
  iterator end() { return entries_.end(); }
  const_iterator begin() const { return entries_.begin(); }
  const_iterator end() const { return entries_.end(); }
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }

  // end() when `slot` is not pinned (a negative slot never is).
  iterator find(int64_t slot) {
    const uint32_t at = Lookup(slot);
    return at == 0 ? entries_.end() : entries_.begin() + (at - 1);
  }
  const_iterator find(int64_t slot) const {
    const uint32_t at = Lookup(slot);
    return at == 0 ? entries_.end() : entries_.begin() + (at - 1);
  }
  bool contains(int64_t slot) const { return Lookup(slot) != 0; }
  // REQUIRES: contains(slot).
  SessionPin& at(int64_t slot) { return entries_[Lookup(slot) - 1].second; }
  const SessionPin& at(int64_t slot) const {
    return entries_[Lookup(slot) - 1].second;
  }
  // The pin of `slot`, a new empty one if it had none.
  // REQUIRES: 0 <= slot < kMaxSlots.
  SessionPin& operator[](int64_t slot) {
    const auto s = static_cast<size_t>(slot);
    if (s >= index_.size()) index_.resize(s + 1, 0);
    if (index_[s] == 0) {
      entries_.emplace_back(std::piecewise_construct,
                            std::forward_as_tuple(slot),
                            std::forward_as_tuple());
      index_[s] = static_cast<uint32_t>(entries_.size());
    }
    return entries_[index_[s] - 1].second;
  }
  // REQUIRES: `it` is a valid entry.
  void erase(iterator it) {
    index_[static_cast<size_t>(it->first)] = 0;
    if (it != entries_.end() - 1) {
      *it = std::move(entries_.back());
      index_[static_cast<size_t>(it->first)] =
          static_cast<uint32_t>(it - entries_.begin() + 1);
    }
    entries_.pop_back();
  }
  // Erases every entry for which `drop(entry)` is true; the rest keep their
  // relative order.
  template <typename Drop>
  void EraseIf(Drop drop) {
    size_t kept = 0;
    for (size_t i = 0; i < entries_.size(); ++i) {
      value_type& e = entries_[i];
      const auto s = static_cast<size_t>(e.first);
      if (drop(e)) {
        index_[s] = 0;
        continue;
      }
      if (kept != i) entries_[kept] = std::move(e);
      index_[s] = static_cast<uint32_t>(++kept);
    }
    entries_.resize(kept);
  }
  void clear() {
    for (const value_type& e : entries_)
      index_[static_cast<size_t>(e.first)] = 0;
    entries_.clear();
  }

 private:
  uint32_t Lookup(int64_t slot) const {
    const auto s = static_cast<size_t>(slot);
    return s < index_.size() ? index_[s] : 0;
  }

  std::vector<uint32_t> index_;
  std::vector<value_type> entries_;
};

// A live request's slot moved by a shrink, inside its session's begin_pass
// and reported in that begin_pass's result.
struct PendingMove {
  std::string request_id;
  int32_t index = 0;
  int64_t from_slot = -1;
  int64_t to_slot = -1;
};

struct Session {
  // The bearer token: known only to the session's holder.
  std::string id;
  // What operators name it by ("s" and a number unique to this daemon's
  // life); not a credential.
  std::string handle;
  uint64_t handle_number = 0;
  // Who attached it: every call naming it must come from the same principal.
  Peer owner;
  std::string client_name;
  // Attached with advise_placement, and the daemon gives advice.
  bool advised = false;
  absl::Time attached_at;
  absl::Time last_seen;
  absl::flat_hash_map<std::string, std::unique_ptr<Request>> requests;
  // Slot -> this session's pins on it and their readers. Unordered: it
  // changes on most operations of a pass, and the clock, which must release
  // in slot order as the reference's release_pins does, sorts its slots once
  // per pass (SortedPins) instead.
  SessionPins pins;

  // No-op if `slot` is not pinned or `request` does not read it.
  void RemoveReader(int64_t slot, const Request* request) {
    auto it = pins.find(slot);
    if (it != pins.end()) it->second.RemoveReader(request);
  }
  // The pins in slot order, into `out` (cleared first; `scratch` is room
  // for the sort). The pointers stay valid until `pins` changes.
  void SortedPins(std::vector<std::pair<int64_t, SessionPin*>>& out,
                  std::vector<std::pair<int64_t, SessionPin*>>& scratch) {
    out.clear();
    for (auto& [slot, pin] : pins) out.emplace_back(slot, &pin);
    SortBySlot(out, scratch, [](const auto& p) { return p.first; });
  }
  std::vector<PendingMove> moves;
  // Slots and reservations its requests hold (what the per-session quota
  // counts), kept as they change; CheckInvariants recounts it.
  int64_t held_slots = 0;
  // The request an operation last named: a pass names most requests twice
  // in a row (consume_fork, then checkpoint), so this spares the second
  // lookup. Null, or a request of this session.
  Request* recent = nullptr;

  // Makes `request` the recent one, filed in the naming order right after
  // the one it follows. A scheduler names its requests in much the same
  // order every pass, so the request named after `recent` last time is
  // most often the one named next (FindRequest tries it before the map).
  void NameNext(Request* request) {
    if (recent != nullptr && recent != request &&
        recent->named_next != request) {
      Unname(*request);
      request->named_prev = recent;
      request->named_next = recent->named_next;
      if (recent->named_next != nullptr) {
        recent->named_next->named_prev = request;
      }
      recent->named_next = request;
    }
    recent = request;
  }
  // Takes `request` out of the naming order (and out of `recent`); due
  // before it leaves the session.
  void Unname(Request& request) {
    if (recent == &request) recent = nullptr;
    if (request.named_prev != nullptr) {
      request.named_prev->named_next = request.named_next;
    }
    if (request.named_next != nullptr) {
      request.named_next->named_prev = request.named_prev;
    }
    request.named_prev = request.named_next = nullptr;
  }
};

enum class SessionEnd { kDetached, kExpired, kEvicted };

}  // namespace statecache

#endif  // STATECACHE_DAEMON_SERVICE_SESSION_H_
