#include "daemon/service/sessions.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/common/status_macros.h"

namespace statecache {
namespace {

constexpr size_t kEndedSessionsRemembered = 1024;

// The first and the last sizeof(Word) bytes of p and q, n bytes each, are
// equal. REQUIRES: sizeof(Word) <= n.
template <typename Word>
bool EndsEqual(const char* p, const char* q, size_t n) {
  Word p0, q0, p1, q1;
  std::memcpy(&p0, p, sizeof(Word));
  std::memcpy(&q0, q, sizeof(Word));
  std::memcpy(&p1, p + n - sizeof(Word), sizeof(Word));
  std::memcpy(&q1, q + n - sizeof(Word), sizeof(Word));
  return ((p0 ^ q0) | (p1 ^ q1)) == 0;
}

// a == b, inline for ids of up to 16 bytes (what schedulers name requests
// by): FindRequest compares an id or two for most operations of a pass, and
// memcmp is a call through the PLT each time.
bool SameId(absl::string_view a, absl::string_view b) {
  const size_t n = a.size();
  if (n != b.size()) return false;
  if (n == 0 || n > 16) return a == b;
  const char* p = a.data();
  const char* q = b.data();
  // Two loads from each end cover every byte (they overlap when shorter).
  if (n >= 8) return EndsEqual<uint64_t>(p, q, n);
  if (n >= 4) return EndsEqual<uint32_t>(p, q, n);
  return p[0] == q[0] && p[n / 2] == q[n / 2] && p[n - 1] == q[n - 1];
}

std::string RandomToken() {
  std::random_device rd;  // /dev/urandom on Linux
  uint64_t a = (uint64_t{rd()} << 32) | rd();
  uint64_t b = (uint64_t{rd()} << 32) | rd();
  return absl::StrFormat("%016x%016x", a, b);
}

}  // namespace

// ------------------------------------------------------------------ table

Session& SessionTable::Add(std::string client_name, const Peer& owner,
                           absl::Time now) {
  auto session = std::make_unique<Session>();
  session->id = RandomToken();
  session->handle_number = ++last_handle_;
  session->handle = absl::StrCat("s", session->handle_number);
  session->owner = owner;
  session->client_name = std::move(client_name);
  session->attached_at = session->last_seen = now;
  Session& added = *session;
  sessions_.emplace(added.id, std::move(session));
  return added;
}

Session* SessionTable::Get(absl::string_view id) const {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second.get();
}

Session* SessionTable::GetByHandle(absl::string_view handle) const {
  for (const auto& [id, session] : sessions_) {
    if (session->handle == handle) return session.get();
  }
  return nullptr;
}

std::vector<const Session*> SessionTable::PageAfter(uint64_t after,
                                                    size_t limit) const {
  std::vector<const Session*> page;
  for (const auto& [id, session] : sessions_) {
    if (session->handle_number > after) page.push_back(session.get());
  }
  const auto by_handle = [](const Session* a, const Session* b) {
    return a->handle_number < b->handle_number;
  };
  if (page.size() > limit) {
    std::nth_element(page.begin(), page.begin() + limit, page.end(), by_handle);
    page.resize(limit);
  }
  std::sort(page.begin(), page.end(), by_handle);
  return page;
}

std::optional<SessionEnd> SessionTable::EndedHow(absl::string_view id) const {
  auto it = ended_.find(id);
  if (it == ended_.end()) return std::nullopt;
  return it->second;
}

void SessionTable::Erase(const std::string& id, SessionEnd how) {
  // By value: `id` may live in the session being erased.
  const std::string key = id;
  sessions_.erase(key);
  if (ended_.emplace(key, how).second) {
    ended_order_.push_back(key);
    if (ended_order_.size() > kEndedSessionsRemembered) {
      ended_.erase(ended_order_.front());
      ended_order_.erase(ended_order_.begin());
    }
  }
}

std::vector<std::string> SessionTable::Lapsed(absl::Time now,
                                              absl::Duration ttl) const {
  std::vector<std::string> lapsed;
  for (const auto& [id, session] : sessions_) {
    if (now - session->last_seen > ttl) lapsed.push_back(id);
  }
  return lapsed;
}

absl::Time SessionTable::NextLapse(absl::Duration ttl) const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [id, session] : sessions_) {
    next = std::min(next, session->last_seen + ttl);
  }
  return next;
}

int64_t SessionTable::NumRequests() const {
  int64_t n = 0;
  for (const auto& [id, session] : sessions_) {
    n += static_cast<int64_t>(session->requests.size());
  }
  return n;
}

std::vector<const Session*> SessionTable::InAttachOrder() const {
  std::vector<const Session*> sorted;
  for (const auto& [id, session] : sessions_) sorted.push_back(session.get());
  std::sort(sorted.begin(), sorted.end(),
            [](const Session* a, const Session* b) {
              return a->attached_at != b->attached_at
                         ? a->attached_at < b->attached_at
                         : a->id < b->id;
            });
  return sorted;
}

std::vector<const Session*> SessionTable::InIdOrder() const {
  std::vector<const Session*> sorted;
  for (const auto& [id, session] : sessions_) sorted.push_back(session.get());
  std::sort(sorted.begin(), sorted.end(),
            [](const Session* a, const Session* b) { return a->id < b->id; });
  return sorted;
}

// ------------------------------------------------------------------ pins

void AddReader(Session& session, int64_t slot, Request* request,
               bool deferred) {
  SessionPin& pin = session.pins[slot];
  ++pin.count;
  if (deferred) pin.deferred = true;
  pin.readers.push_back(request);
}

absl::StatusOr<int32_t> TickPinClock(SlotMemory& memory, Session& session,
                                     PinScratch& scratch) {
  // Deferrals end in any order (each touches only its own slot); releases
  // refile slots, so they go in slot order, and only they are sorted. About
  // half the pins of a pass are deferred, in no order, so the pins are split
  // without a branch on which they are: each is written to both lists and
  // only the list it belongs to moves on.
  const size_t n = session.pins.size();
  scratch.returned.resize(n);
  scratch.deferred.resize(n);
  size_t num_returned = 0;
  size_t num_deferred = 0;
  for (auto& [slot, pin] : session.pins) {
    const bool deferred = pin.deferred;
    scratch.returned[num_returned] = {slot, &pin};
    scratch.deferred[num_deferred] = {slot, &pin};
    num_returned += !deferred;
    num_deferred += deferred;
  }
  scratch.returned.resize(num_returned);
  scratch.deferred.resize(num_deferred);
  for (const auto& [slot, pin] : scratch.deferred) {
    pin->deferred = false;
    RETURN_IF_ERROR(memory.EndDeferral(slot));
  }
  SortBySlot(scratch.returned, scratch.returned_sort,
             [](const auto& p) { return p.first; });
  int32_t released = 0;
  absl::Status status;
  for (const auto& [slot, pin] : scratch.returned) {
    // Every pin goes back even after a failure: the session forgets them
    // all below, so one skipped would stay pinned in the pool for good.
    absl::Status returned = memory.ReturnPins(slot, pin->count);
    if (status.ok()) status = returned;
    released += pin->count;
    // Its readers forget it: the slot may be handed to someone else now.
    for (Request* reader : pin->readers) reader->fork_src = -1;
    // Marks it for the sweep below (a kept pin's count is never 0).
    pin->count = 0;
  }
  // The returned pins go in one sweep (erasing them one by one would move
  // the entries the list still points at); the deferred ones stay, due at
  // the next tick.
  session.pins.EraseIf(
      [](const SessionPins::value_type& e) { return e.second.count == 0; });
  scratch.returned.clear();
  scratch.deferred.clear();
  RETURN_IF_ERROR(status);
  return released;
}

absl::Status ReleaseRequest(SlotMemory& memory, Session& session,
                            Request& request) {
  session.Unname(request);
  const int64_t src = request.fork_src;
  auto pin = src >= 0 ? session.pins.find(src) : session.pins.end();
  const bool reads = pin != session.pins.end();
  const auto held =
      static_cast<int64_t>(request.slots.size() + request.reservations.size());
  RETURN_IF_ERROR(memory.Release(request, /*drop_reader=*/reads));
  session.held_slots -= held;
  if (reads) {
    pin->second.RemoveReader(&request);
    if (--pin->second.count == 0) session.pins.erase(pin);
  }
  return absl::OkStatus();
}

namespace {

// The session's requests in admission order, so what the pool files (and its
// LRU order) does not depend on hash-map order.
std::vector<Request*> InAdmissionOrder(Session& session) {
  std::vector<Request*> requests;
  requests.reserve(session.requests.size());
  for (auto& [id, request] : session.requests) {
    requests.push_back(request.get());
  }
  std::sort(
      requests.begin(), requests.end(),
      [](const Request* a, const Request* b) { return a->seqno < b->seqno; });
  return requests;
}

// Returns the pins the session's clock still holds, in slot order, and
// forgets them; the first failure is reported after all went back.
absl::Status ReturnAllPins(SlotMemory& memory, Session& session,
                           PinScratch& scratch) {
  absl::Status status;
  session.SortedPins(scratch.sorted, scratch.sort);
  for (const auto& [slot, pin] : scratch.sorted) {
    absl::Status st = memory.ReturnPins(slot, pin->count);
    if (status.ok()) status = st;
  }
  scratch.sorted.clear();
  session.pins.clear();
  return status;
}

}  // namespace

absl::StatusOr<int32_t> ReleaseSession(SlotMemory& memory, Session& session,
                                       PinScratch& scratch) {
  const std::vector<Request*> requests = InAdmissionOrder(session);
  // Every step runs even after a failure, so the session gives back all it
  // can; the first failure is reported.
  absl::Status status;
  for (Request* request : requests) {
    absl::Status st = ReleaseRequest(memory, session, *request);
    if (status.ok()) status = st;
  }
  const auto released = static_cast<int32_t>(requests.size());
  session.requests.clear();
  session.recent = nullptr;
  absl::Status pins = ReturnAllPins(memory, session, scratch);
  if (status.ok()) status = pins;
  RETURN_IF_ERROR(status);
  return released;
}

absl::Status FenceSession(SlotMemory& memory, Session& session,
                          PinScratch& scratch,
                          std::vector<std::unique_ptr<Request>>& fenced) {
  absl::Status status;
  for (Request* request : InAdmissionOrder(session)) {
    // Its read of a fork source is over: the pin goes now, with the rest.
    auto pin = request->fork_src >= 0 ? session.pins.find(request->fork_src)
                                      : session.pins.end();
    if (pin != session.pins.end()) {
      absl::Status st = memory.DropForkSource(*request);
      if (status.ok()) status = st;
      pin->second.RemoveReader(request);
      if (--pin->second.count == 0) session.pins.erase(pin);
    }
    request->fork_src = -1;
    request->session = nullptr;
    session.Unname(*request);
    auto node = session.requests.extract(request->id);
    fenced.push_back(std::move(node.mapped()));
  }
  session.requests.clear();
  session.recent = nullptr;
  session.held_slots = 0;
  absl::Status pins = ReturnAllPins(memory, session, scratch);
  if (status.ok()) status = pins;
  return status;
}

absl::StatusOr<Request*> FindRequest(Session& session, absl::string_view id) {
  if (Request* recent = session.recent; recent != nullptr) {
    if (SameId(recent->id, id)) return recent;
    // The one named after it last time (see Session::NameNext), without
    // the map's hashing and probing.
    if (Request* next = recent->named_next;
        next != nullptr && SameId(next->id, id)) {
      session.recent = next;
      return next;
    }
  }
  auto it = session.requests.find(id);
  if (it == session.requests.end()) {
    return absl::NotFoundError(
        absl::StrCat("this session holds no request '", id, "'"));
  }
  session.NameNext(it->second.get());
  return session.recent;
}

}  // namespace statecache
