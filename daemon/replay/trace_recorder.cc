#include "daemon/replay/trace_recorder.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace statecache::replay {

absl::Status TraceRecorder::status() const {
  if (!failure_.empty()) return absl::FailedPreconditionError(failure_);
  if (!replay_.has_value()) {
    return absl::FailedPreconditionError("no pool has told the recorder yet");
  }
  if (tick_.has_value()) {
    return absl::FailedPreconditionError(
        "the trace ends inside a pin clock tick: release_pins is written, "
        "the pool was not yet told all of it");
  }
  return absl::OkStatus();
}

PoolSnapshot TraceRecorder::ReplayedDump() const {
  return replay_.has_value() ? replay_->Dump() : PoolSnapshot{};
}

void TraceRecorder::Fail(std::string why) {
  if (failure_.empty()) failure_ = std::move(why);
}

void TraceRecorder::OnStart(const SlotPool& pool) {
  if (replay_.has_value() || !failure_.empty()) {
    Fail("the recorder was set on a pool twice: one trace is one pool's");
    return;
  }
  config_ = ConfigOf(pool);
  absl::StatusOr<SlotPool> fresh = MakePool(config_);
  if (!fresh.ok()) {
    Fail(absl::StrCat("the pool's configuration has no config line: ",
                      fresh.status().ToString()));
    return;
  }
  if (fresh->Dump() != pool.Dump()) {
    Fail(
        "the recorder was set on a pool already used: a trace starts from "
        "the state its config line makes");
    return;
  }
  replay_.emplace(*std::move(fresh));
  lines_.push_back(FormatConfig(config_));
  results_.push_back("{\"ok\":true}");  // statecache-replay's, for a config
}

void TraceRecorder::Write(const Call& call, const absl::Status& status,
                          const Value& value) {
  std::string line = FormatCall(call);
  ParsedLine parsed = ParseLine(line);
  if (parsed.kind != ParsedLine::Kind::kCall) {
    Fail(absl::StrCat("line ", lines_.size() + 1, " (", line,
                      ") does not read back: ", parsed.error));
    return;
  }
  std::string given = FormatResult(CallResult{status, value});
  const std::string replayed = FormatResult(Invoke(*replay_, parsed.call));
  if (replayed != given) {
    Fail(absl::StrCat("line ", lines_.size() + 1, " (", line, ") replays to ",
                      replayed, " where the pool gave ", given));
    return;
  }
  lines_.push_back(std::move(line));
  results_.push_back(std::move(given));
  calls_.push_back(std::move(parsed.call));
}

void TraceRecorder::OnCall(const PoolCall& call, const absl::Status& status,
                           const PoolValue& value) {
  if (!recording()) return;
  if (tick_.has_value()) {
    Fail(absl::StrCat(
        "a pin clock tick ended part way (", FormatCall(call),
        " came before the rest of it): it returned fewer pins than "
        "release_pins would, so another session holds pins"));
    return;
  }
  Write(call, status, value);
}

void TraceRecorder::StartTick() {
  const PoolSnapshot pool = replay_->Dump();
  Tick tick;
  tick.deferred = pool.deferred;
  for (const auto& [slot, count] : pool.pinned) {
    if (!std::binary_search(pool.deferred.begin(), pool.deferred.end(), slot)) {
      tick.returned.emplace_back(slot, count);
    }
  }
  Write(Call{.op = Op::kReleasePins}, absl::OkStatus(), Value());
  if (!failure_.empty()) return;
  tick_ = std::move(tick);
}

void TraceRecorder::EndTickIfDone() {
  if (tick_->deferred.empty() &&
      tick_->next_returned == tick_->returned.size()) {
    tick_.reset();
  }
}

void TraceRecorder::OnEndDeferral(int64_t slot, const absl::Status& status) {
  if (!recording()) return;
  if (!status.ok()) {
    Fail(absl::StrCat("end_deferral(", slot,
                      ") was refused: ", status.ToString()));
    return;
  }
  if (!tick_.has_value()) StartTick();
  if (!recording()) return;
  auto it = std::find(tick_->deferred.begin(), tick_->deferred.end(), slot);
  if (it == tick_->deferred.end()) {
    Fail(absl::StrCat("end_deferral(", slot, ") is not release_pins': slot ",
                      slot,
                      " was not deferred, or its deferral ended already"));
    return;
  }
  tick_->deferred.erase(it);
  EndTickIfDone();
}

void TraceRecorder::OnReleasePin(int64_t slot, int64_t count,
                                 const absl::Status& status) {
  if (!recording()) return;
  if (!status.ok()) {
    Fail(absl::StrCat("release_pin(", slot, ", ", count,
                      ") was refused: ", status.ToString()));
    return;
  }
  if (!tick_.has_value()) StartTick();
  if (!recording()) return;
  const std::pair<int64_t, int64_t> told{slot, count};
  if (tick_->next_returned == tick_->returned.size() ||
      tick_->returned[tick_->next_returned] != told) {
    Fail(absl::StrCat(
        "release_pin(", slot, ", ", count,
        ") is not release_pins': that returns every pin not deferred, "
        "whole, in slot order (a session's tick while another session "
        "holds pins, or a session's end returning deferred ones, has no "
        "line)"));
    return;
  }
  ++tick_->next_returned;
  EndTickIfDone();
}

void TraceRecorder::OnRestoreCheckpoint(int64_t slot, int64_t hash,
                                        bool speculative,
                                        const absl::Status& status) {
  if (!recording()) return;
  Fail(absl::StrCat("restore_checkpoint(", slot, ", ", hash, ", ",
                    speculative ? "speculative" : "kept",
                    "): a warm restart's refiling has no line"));
}

}  // namespace statecache::replay
