// Sessions, their leases and their pin clocks.
//
// SessionTable keeps the live sessions by id and remembers how recently
// ended ones ended, so a late call is told why it is refused. The pin-clock
// functions below are the per-session share of the reference's pin clock: a
// session's begin_pass returns only the pins that session took, so one
// scheduler's clock never frees a fork source another still reads.
//
// Thread safety: thread-compatible; StateCache calls these under its mutex.
#ifndef STATECACHE_DAEMON_SERVICE_SESSIONS_H_
#define STATECACHE_DAEMON_SERVICE_SESSIONS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/core/slot_memory.h"
#include "daemon/service/session.h"

namespace statecache {

class SessionTable {
 public:
  // A new session of `owner` with a fresh random id (a bearer token) and
  // the next handle, its lease starting at `now`.
  Session& Add(std::string client_name, const Peer& owner, absl::Time now);
  // The live session `id`, or null.
  Session* Get(absl::string_view id) const;
  // The live session whose handle is `handle`, or null. O(sessions).
  Session* GetByHandle(absl::string_view handle) const;
  // How `id` ended, if it ended recently (the last few thousand).
  std::optional<SessionEnd> EndedHow(absl::string_view id) const;
  // Forgets a live session, remembering how it ended.
  // REQUIRES: Get(id) != null, and its requests and pins already returned.
  void Erase(const std::string& id, SessionEnd how);

  // Live sessions whose lease lapsed before `now`.
  std::vector<std::string> Lapsed(absl::Time now, absl::Duration ttl) const;
  // When the first lease lapses (InfiniteFuture with no sessions).
  absl::Time NextLapse(absl::Duration ttl) const;

  size_t size() const { return sessions_.size(); }
  // Requests held by every session.
  int64_t NumRequests() const;
  // Live sessions in attach order (ties by id).
  std::vector<const Session*> InAttachOrder() const;
  // Live sessions in id order.
  std::vector<const Session*> InIdOrder() const;
  // Up to `limit` live sessions whose handle number is above `after`, in
  // handle (that is, attach) order.
  std::vector<const Session*> PageAfter(uint64_t after, size_t limit) const;

 private:
  uint64_t last_handle_ = 0;
  absl::flat_hash_map<std::string, std::unique_ptr<Session>> sessions_;
  absl::flat_hash_map<std::string, SessionEnd> ended_;
  std::vector<std::string> ended_order_;
};

// Room for sorting a session's pins by slot (reused: no allocation).
struct PinScratch {
  std::vector<std::pair<int64_t, SessionPin*>> sorted;
  std::vector<std::pair<int64_t, SessionPin*>> sort;
  // The pin clock's: the pins a tick returns and the deferrals it ends.
  std::vector<std::pair<int64_t, SessionPin*>> returned;
  std::vector<std::pair<int64_t, SessionPin*>> returned_sort;
  std::vector<std::pair<int64_t, SessionPin*>> deferred;
};

// `request` reads `slot` next: one more of the session's pins on it (the
// pool's pin is taken by the verb that made the request a reader).
// `deferred`: the reader is the next batch's, so the pin survives one tick.
void AddReader(Session& session, int64_t slot, Request* request, bool deferred);

// The session's begin_pass: deferred pins survive one more tick; the rest
// go back to the pool in slot order (as the reference's release_pins), and
// their readers forget them. Returns how many pins went back.
// Errors: only when the pool disagrees with the session's pins (a bug): the
//   pool's INVALID_ARGUMENT (a pinned slot out of range, or a pin count
//   below 1) or FAILED_PRECONDITION (the pool holds fewer pins than the
//   session counts). A failed deferral ends the tick there; after a failed
//   return the others still go back, and the first failure is returned.
absl::StatusOr<int32_t> TickPinClock(SlotMemory& memory, Session& session,
                                     PinScratch& scratch);

// Returns everything `request` holds to the pool, its pin on a fork source
// included. The request stays in the session (the caller erases it).
// Errors: SlotMemory::Release's, all of them a request and pool that
//   disagree (a bug): INVALID_ARGUMENT or FAILED_PRECONDITION (its
//   reservations are not the pool's; the pool unchanged) or INTERNAL (the
//   release failed part way). Either way the session's count of held slots
//   and its pin on the fork source are left as they were.
absl::Status ReleaseRequest(SlotMemory& memory, Session& session,
                            Request& request);

// Returns everything the session holds: its requests in admission order
// (so what the pool files, and its LRU order, does not depend on hash-map
// order), then the pins its clock holds, in slot order. Returns how many
// requests were released; the session is left empty.
// Errors: the first failure of ReleaseRequest or of returning a pin (the
//   pool's INVALID_ARGUMENT or FAILED_PRECONDITION, or INTERNAL: a bug,
//   see TickPinClock and ReleaseRequest). Everything else is still given
//   back and the session is still left empty.
absl::StatusOr<int32_t> ReleaseSession(SlotMemory& memory, Session& session,
                                       PinScratch& scratch);

// Fences what the session holds, for a session whose engine may still be
// writing: its pins go back as ReleaseSession returns them (a read that
// lands late harms nobody), but its requests keep their slots and
// reservations and are moved out into `fenced`, in admission order, for the
// caller to release after the fence (their `session` is null from here).
// The session is left empty, and `fenced` holds every request whatever is
// returned: what they hold stays accounted for.
// Errors: the first failure of dropping a request's fork-source pin
//   (INVALID_ARGUMENT, the source out of the pool's range) or of returning
//   the clock's pins (as TickPinClock's); either is a bug. Every step still
//   runs.
absl::Status FenceSession(SlotMemory& memory, Session& session,
                          PinScratch& scratch,
                          std::vector<std::unique_ptr<Request>>& fenced);

// The session's request `id`.
// Errors: NOT_FOUND naming it.
absl::StatusOr<Request*> FindRequest(Session& session, absl::string_view id);

}  // namespace statecache

#endif  // STATECACHE_DAEMON_SERVICE_SESSIONS_H_
