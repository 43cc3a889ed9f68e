#include "daemon/service/resize.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/service/session.h"

namespace statecache {
namespace {

void ReportStateBytes(const SlotMemory& memory,
                      absl::Span<ResizeObserver* const> observers) {
  if (memory.device() == nullptr) return;
  const auto bytes = static_cast<int64_t>(memory.device()->CommittedBytes());
  for (ResizeObserver* o : observers) o->OnStateBytes(bytes);
}

}  // namespace

absl::Status GrowPool(SlotMemory& memory, int64_t target,
                      absl::Span<ResizeObserver* const> observers) {
  const int64_t from = memory.num_slots();
  RETURN_IF_ERROR(memory.Grow(target));
  for (ResizeObserver* o : observers) o->OnResize(from, target);
  ReportStateBytes(memory, observers);
  return absl::OkStatus();
}

PendingShrink::PendingShrink(const SlotMemory& memory, int64_t target,
                             absl::Time deadline, ResizeDone done)
    : from_(memory.num_slots()),
      target_(target),
      deadline_(deadline),
      evicted_before_(memory.pool().Fates().evicted),
      done_(std::move(done)) {}

bool PendingShrink::Advance(SlotMemory& memory,
                            absl::Span<ResizeObserver* const> observers,
                            Session* passing) {
  const int64_t before = memory.num_slots();
  moved_.clear();
  SlotMemory::ShrinkProgress progress =
      memory.ShrinkStep(target_, moved_, [passing](const SlotHolding& holding) {
        // Every holding the daemon gives SlotMemory is a Request.
        return passing != nullptr &&
               static_cast<const Request&>(holding).session == passing;
      });
  response_.set_relocated(response_.relocated() + progress.relocated);
  if (!progress.failure.ok() && failure_.ok()) failure_ = progress.failure;
  for (const Relocation& r : moved_) {
    // Only `passing`'s requests move.
    const Request& request = *static_cast<const Request*>(r.holding);
    passing->moves.push_back(PendingMove{request.id, r.index, r.from, r.to});
  }
  moved_.clear();
  if (memory.num_slots() != before) ReportStateBytes(memory, observers);
  return progress.reached || !failure_.ok();
}

std::function<void()> PendingShrink::Finish(
    absl::Status status, const SlotMemory& memory,
    absl::Span<ResizeObserver* const> observers) {
  if (status.ok() && !failure_.ok()) {
    status = absl::InternalError(
        absl::StrCat("resize to ", target_, " slots (now ", memory.num_slots(),
                     "): the state memory failed: ", failure_.message()));
  }
  response_.set_num_slots(memory.num_slots());
  response_.set_host_tier_bytes(
      static_cast<int64_t>(memory.host_tier_stats().capacity_bytes));
  if (memory.num_slots() != from_) {
    for (ResizeObserver* o : observers) o->OnResize(from_, memory.num_slots());
  }
  response_.set_evicted(memory.pool().Fates().evicted - evicted_before_);
  return [done = std::move(done_), response = std::move(response_),
          status = std::move(status)] { done(status, response); };
}

}  // namespace statecache
