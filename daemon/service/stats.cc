// StateCache's reports for operators: GetStats and ListSessions. (The
// dumps and invariant checks tests and fuzzers compare: debug.cc.)

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/service/state_cache.h"

namespace statecache {

// ------------------------------------------------------------------ stats

void StateCache::GetStats(v1::GetStatsResponse* response) {
  absl::MutexLock lock(&mu_);
  response->CopyFrom(counters_);  // the service's counters, then the rest
  response->set_epoch(epoch_);
  response->set_uptime_seconds(
      absl::ToDoubleSeconds(clock_->Now() - start_time_));
  const SlotPool& pool = memory_.pool();
  const CheckpointFates fates = pool.Fates();
  response->set_checkpoints_kept(fates.kept);
  response->set_checkpoints_dropped(fates.dropped);
  response->set_checkpoints_evicted(fates.evicted);
  response->set_checkpoints_orphaned(fates.orphaned);
  const Occupancy occ = pool.GetOccupancy();
  response->set_slots_total(occ.total);
  response->set_slots_used(occ.used);
  response->set_slots_held(occ.held);
  response->set_slots_vacant(occ.vacant);
  response->set_sessions(static_cast<int32_t>(sessions_.size()));
  response->set_requests(sessions_.NumRequests());
  FillTransfer(pool.transfer(), response->mutable_transfer());
  *response->mutable_identity() = options_.identity;
  response->set_indexed_hashes(pool.NumIndexed());
  response->set_draining(draining_);
  int64_t quarantined = 0;
  for (const Fenced& f : fenced_) {
    quarantined += static_cast<int64_t>(f.request->slots.size() +
                                        f.request->reservations.size());
  }
  response->set_slots_quarantined(quarantined);
  const SlotMemory::HostTierStats tier = memory_.host_tier_stats();
  response->set_host_tier_capacity_bytes(
      static_cast<int64_t>(tier.capacity_bytes));
  response->set_host_tier_bytes(static_cast<int64_t>(tier.held_bytes));
  response->set_host_tier_entries(tier.entries);
  response->set_host_tier_demotions(tier.counts.demotions);
  response->set_host_tier_evictions(tier.counts.evictions);
  response->set_host_tier_demotions_failed(tier.demotions_failed);
  response->set_host_tier_promotions_failed(tier.promotions_failed);
  *response->mutable_warm_restart() = warm_restart_;
  response->set_max_slots(options_.max_slots);
  if (const Device* device = memory_.device(); device != nullptr) {
    response->set_state_bytes(device->CommittedBytes());
    response->set_backend(std::string(device->backend()));
    response->set_layout_name(device->layout().name());
    response->set_bytes_per_slot(device->layout().bytes_per_slot());
    response->set_max_slots(
        std::min<int64_t>(options_.max_slots, device->max_slots()));
  } else {
    response->set_backend("none");
  }
}

absl::Status StateCache::ListSessions(const v1::ListSessionsRequest& request,
                                      v1::ListSessionsResponse* response,
                                      const Peer& peer) {
  RETURN_IF_ERROR(options_.access.CheckAdmin(peer, "ListSessions"));
  constexpr int32_t kDefaultPageSize = 100;
  constexpr int32_t kMaxPageSize = 1000;
  if (request.page_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size is ", request.page_size(), "; at least 0"));
  }
  const int32_t page_size = request.page_size() == 0
                                ? kDefaultPageSize
                                : std::min(request.page_size(), kMaxPageSize);
  // The token is the last handle number of the previous page: sessions
  // attached or ended between pages neither repeat nor shift the rest.
  uint64_t after = 0;
  if (!request.page_token().empty() &&
      !absl::SimpleAtoi(request.page_token(), &after)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page_token '", absl::CHexEscape(request.page_token()),
        "' is not one this daemon handed out; start again with none"));
  }
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  // One more than the page, to know whether another follows.
  std::vector<const Session*> page =
      sessions_.PageAfter(after, static_cast<size_t>(page_size) + 1);
  if (page.size() > static_cast<size_t>(page_size)) {
    page.pop_back();
    response->set_next_page_token(absl::StrCat(page.back()->handle_number));
  }
  response->set_total_sessions(static_cast<int32_t>(sessions_.size()));
  for (const Session* session : page) {
    v1::SessionInfo* info = response->add_sessions();
    info->set_handle(session->handle);
    info->set_principal(session->owner.Principal());
    info->set_client_name(session->client_name);
    info->set_requests(static_cast<int64_t>(session->requests.size()));
    info->set_slots(session->held_slots);
    int64_t pins = 0;
    for (const auto& [slot, pin] : session->pins) pins += pin.count;
    info->set_pins(pins);
    info->set_attached_seconds(
        absl::ToDoubleSeconds(now - session->attached_at));
    info->set_idle_seconds(absl::ToDoubleSeconds(now - session->last_seen));
    info->set_lease_remaining_ms(std::max<int64_t>(
        0, absl::ToInt64Milliseconds(session->last_seen + options_.lease_ttl -
                                     now)));
  }
  return absl::OkStatus();
}

}  // namespace statecache
