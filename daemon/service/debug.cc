// StateCache's dumps and invariant checks, which tests and fuzzers compare
// and assert (DumpPool, DebugDump, CheckInvariants).

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/common/status_macros.h"
#include "daemon/service/state_cache.h"

namespace statecache {

PoolSnapshot StateCache::DumpPool() const {
  absl::MutexLock lock(&mu_);
  return memory_.pool().Dump();
}

namespace {

// "[(a,b) (c,d)]" for a dump's pairs.
std::string Pairs(const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  return absl::StrCat(
      "[",
      absl::StrJoin(pairs, " ",
                    [](std::string* out, const std::pair<int64_t, int64_t>& p) {
                      absl::StrAppend(out, "(", p.first, ",", p.second, ")");
                    }),
      "]");
}

std::string List(const std::vector<int64_t>& values) {
  return absl::StrCat("[", absl::StrJoin(values, " "), "]");
}

}  // namespace

std::string StateCache::DebugDump() const {
  absl::MutexLock lock(&mu_);
  const PoolSnapshot pool = memory_.pool().Dump();
  std::string out = absl::StrCat(
      "pool num_slots=", pool.num_slots, " free=", List(pool.free),
      " checkpointed=", List(pool.checkpointed),
      " speculative=", List(pool.speculative),
      " hash_to_slot=", Pairs(pool.hash_to_slot),
      " slot_hash=", List(pool.slot_hash), " pinned=", Pairs(pool.pinned),
      " deferred=", List(pool.deferred),
      " relocations=", Pairs(pool.relocations), " fates=", pool.fates.kept, "/",
      pool.fates.dropped, "/", pool.fates.evicted, "/", pool.fates.orphaned,
      "\n");
  // Hash maps iterate in no fixed order: sort by id (and slot).
  for (const Session* session : sessions_.InIdOrder()) {
    absl::StrAppend(&out, "session ", session->id, "\n");
    std::vector<const Request*> requests;
    for (const auto& [id, request] : session->requests) {
      requests.push_back(request.get());
    }
    std::sort(requests.begin(), requests.end(),
              [](const Request* a, const Request* b) { return a->id < b->id; });
    for (const Request* r : requests) {
      absl::StrAppend(&out, "  request ", r->id, " seqno=", r->seqno,
                      " slots=", List(r->slots), " fork_src=", r->fork_src,
                      " tokens=", r->num_tokens, " anchor=", r->anchor_pos,
                      " reservations=[");
      for (const Reservation& v : r->reservations) {
        absl::StrAppend(&out, "(", v.slot, ",", v.position, ",", v.hash, ")");
      }
      absl::StrAppend(&out, "]\n");
    }
    std::vector<int64_t> pinned;
    for (const auto& [slot, pin] : session->pins) pinned.push_back(slot);
    std::sort(pinned.begin(), pinned.end());
    for (int64_t slot : pinned) {
      const SessionPin& pin = session->pins.at(slot);
      std::vector<std::string> readers;
      for (const Request* reader : pin.readers) readers.push_back(reader->id);
      std::sort(readers.begin(), readers.end());
      absl::StrAppend(&out, "  pin ", slot, " count=", pin.count,
                      " deferred=", pin.deferred, " readers=[",
                      absl::StrJoin(readers, " "), "]\n");
    }
    for (const PendingMove& m : session->moves) {
      absl::StrAppend(&out, "  move ", m.request_id, "[", m.index, "] ",
                      m.from_slot, "->", m.to_slot, "\n");
    }
  }
  for (const Fenced& f : fenced_) {
    absl::StrAppend(&out, "fenced ", f.request->id,
                    " until=", absl::FormatTime(f.until),
                    " slots=", List(f.request->slots),
                    " reservations=", f.request->reservations.size(), "\n");
  }
  return out;
}

absl::Status StateCache::CheckInvariants() const {
  absl::MutexLock lock(&mu_);
  const SlotPool& pool = memory_.pool();
  RETURN_IF_ERROR(pool.CheckInvariants());
  // Every session pin is a pool pin, and the pool holds no pin nobody owns.
  absl::flat_hash_map<int64_t, int64_t> pins;
  int64_t owned = 0;  // slots and reservations requests hold
  for (const Session* session : sessions_.InIdOrder()) {
    const std::string& id = session->id;
    for (const auto& [slot, pin] : session->pins) {
      if (pin.count <= 0) {
        return absl::InternalError(absl::StrCat("session pin of slot ", slot,
                                                " has count ", pin.count));
      }
      pins[slot] += pin.count;
      if (pin.readers.size() > static_cast<size_t>(pin.count)) {
        return absl::InternalError(
            absl::StrCat("slot ", slot, " has ", pin.readers.size(),
                         " readers but ", pin.count, " pins in session ", id));
      }
      for (const Request* reader : pin.readers) {
        auto req = session->requests.find(reader->id);
        if (req == session->requests.end() || req->second.get() != reader ||
            reader->fork_src != slot) {
          return absl::InternalError(absl::StrCat(
              "reader '", reader->id, "' of slot ", slot, " does not read it"));
        }
      }
    }
    int64_t held = 0;
    for (const auto& [rid, request] : session->requests) {
      held += static_cast<int64_t>(request->slots.size() +
                                   request->reservations.size());
    }
    if (held != session->held_slots) {
      return absl::InternalError(
          absl::StrCat("session ", id, " counts ", session->held_slots,
                       " held slots; its requests hold ", held));
    }
    for (const auto& [rid, request] : session->requests) {
      for (size_t i = 0; i < request->slots.size(); ++i) {
        const int64_t slot = request->slots[i];
        if (slot < 0 || slot >= pool.num_slots() || *pool.IsFree(slot)) {
          return absl::InternalError(absl::StrCat("request '", rid,
                                                  "' holds slot ", slot,
                                                  " the pool says is free "
                                                  "or out of range"));
        }
        const SlotMemory::Owner owner = memory_.OwnerOf(slot);
        if (owner.holding != request.get() ||
            owner.index != static_cast<int32_t>(i)) {
          return absl::InternalError(
              absl::StrCat("owner table disagrees for slot ", slot));
        }
        ++owned;
      }
      for (const Reservation& r : request->reservations) {
        if (r.slot < 0 || memory_.OwnerOf(r.slot).holding != request.get() ||
            memory_.OwnerOf(r.slot).index != -1) {
          return absl::InternalError(
              absl::StrCat("owner table disagrees for reserved slot ", r.slot));
        }
        ++owned;
      }
    }
  }
  // Fenced requests hold their slots and reservations until released.
  for (const Fenced& f : fenced_) {
    const Request& request = *f.request;
    if (request.session != nullptr || request.fork_src != -1) {
      return absl::InternalError(absl::StrCat(
          "fenced request '", request.id, "' still names a session or reads"));
    }
    for (size_t i = 0; i < request.slots.size(); ++i) {
      const SlotMemory::Owner owner = memory_.OwnerOf(request.slots[i]);
      if (owner.holding != &request || owner.index != static_cast<int32_t>(i)) {
        return absl::InternalError(absl::StrCat(
            "owner table disagrees for fenced slot ", request.slots[i]));
      }
      ++owned;
    }
    owned += static_cast<int64_t>(request.reservations.size());
  }
  // ...and it names nobody else: a stale entry would re-point the wrong
  // request when a shrink relocates that slot.
  const int64_t owner_entries = memory_.NumOwned();
  if (owner_entries != owned) {
    return absl::InternalError(absl::StrCat("owner table names ", owner_entries,
                                            " slots, requests hold ", owned));
  }
  const PoolSnapshot snap = pool.Dump();
  if (static_cast<int64_t>(snap.pinned.size()) !=
      static_cast<int64_t>(pins.size())) {
    return absl::InternalError("pool pins and session pins disagree");
  }
  for (const auto& [slot, count] : snap.pinned) {
    auto it = pins.find(slot);
    if (it == pins.end() || it->second != count) {
      return absl::InternalError(absl::StrCat(
          "slot ", slot, " has ", count, " pool pins but sessions hold ",
          it == pins.end() ? 0 : it->second));
    }
  }
  return absl::OkStatus();
}

}  // namespace statecache
