#include "client/ctl/commands.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/ctl/format.h"
#include "client/ctl/stats_view.h"
#include "nlohmann/json.hpp"

namespace statecache::ctl {
namespace {

// How long drain --wait waits unless --timeout says otherwise.
constexpr absl::Duration kDefaultDrainTimeout = absl::Seconds(60);
// Without any change, resize progress repeats itself this often.
constexpr absl::Duration kProgressQuietPeriod = absl::Seconds(5);

std::atomic<bool> g_interrupted{false};

extern "C" void OnInterrupt(int) { g_interrupted.store(true); }

// Takes SIGINT (and SIGTERM) as "stop watching": the command finishes its
// frame and exits 0.
void CatchInterrupts() {
  struct sigaction action = {};
  action.sa_handler = &OnInterrupt;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

// Sleeps until `until` or an interrupt, whichever is first. True if
// interrupted.
bool SleepUntil(absl::Time until) {
  for (;;) {
    if (g_interrupted.load()) return true;
    const absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    absl::SleepFor(std::min(left, absl::Milliseconds(20)));
  }
}

absl::Status StatusCommand(Client& client, const CommandLine& line) {
  absl::StatusOr<DaemonStats> stats = client.GetStats();
  if (!stats.ok()) return stats.status();
  if (line.json) {
    nlohmann::json out = StatsJson(*stats);
    out["address"] = line.address;
    std::cout << out.dump(2) << "\n";
    return absl::OkStatus();
  }
  const ModelIdentity& id = stats->identity;
  PrintTable({
      {"address", line.address},
      {"epoch", absl::StrCat(stats->epoch)},
      {"uptime", HumanDuration(absl::Seconds(stats->uptime_seconds))},
      {"admitting",
       stats->draining ? "no: draining (drain --resume to admit)" : "yes"},
      {"slots", absl::StrFormat("%d total: %d used, %d held, %d vacant",
                                stats->slots_total, stats->slots_used,
                                stats->slots_held, stats->slots_vacant)},
      {"memory", MemoryText(*stats)},
      {"checkpoints", absl::StrFormat("%d indexed", stats->indexed_hashes)},
      {"sessions",
       absl::StrFormat("%d (%d requests)", stats->sessions, stats->requests)},
      {"transfer", TransferText(stats->transfer)},
      {"model", absl::StrFormat("\"%s\" block=%d namespace=\"%s\" num_spec=%d",
                                id.model_id, id.hash_block_size,
                                id.hash_namespace, id.num_spec)},
  });
  return absl::OkStatus();
}

// The stats tables: each section prints its fields its own way and marks
// them shown; whatever no section shows follows under "more", named as the
// proto names it, so a new field is never left out.
void PrintStatsTables(const DaemonStats& s) {
  StatsFieldSet fields(s);
  // The configuration and identity are `statecachectl status`'s.
  fields.Shown({"epoch", "uptime_seconds", "transfer.", "identity.",
                "state_bytes", "backend", "max_slots", "layout_name",
                "bytes_per_slot"});
  // The capacity reading from the reference's checkpoint_fates: evictions
  // tracking `kept - slots` means the pool is too small.
  std::cout << "checkpoints (cumulative)\n";
  fields.Shown({"checkpoints_kept", "checkpoints_dropped",
                "checkpoints_evicted", "checkpoints_orphaned",
                "checkpoints_superseded", "indexed_hashes"});
  PrintTable(
      {{"kept", absl::StrCat(s.checkpoints_kept)},
       {"dropped", absl::StrCat(s.checkpoints_dropped)},
       {"evicted", absl::StrCat(s.checkpoints_evicted)},
       {"orphaned", absl::StrCat(s.checkpoints_orphaned)},
       {"superseded", absl::StrCat(s.checkpoints_superseded)},
       {"kept - slots", absl::StrCat(s.checkpoints_kept - s.slots_total)},
       {"indexed now", absl::StrCat(s.indexed_hashes)}},
      "  ");
  std::cout << "slots (now)\n";
  fields.Shown({"slots_total", "slots_used", "slots_held", "slots_vacant",
                "slots_quarantined"});
  PrintTable({{"total", absl::StrCat(s.slots_total)},
              {"used", absl::StrCat(s.slots_used)},
              {"held", absl::StrCat(s.slots_held)},
              {"vacant", absl::StrCat(s.slots_vacant)},
              {"quarantined (in used)", absl::StrCat(s.slots_quarantined)}},
             "  ");
  std::cout << "resumes (cumulative)\n";
  fields.Shown({"resumes_fork", "resumes_adopt", "resumes_tier", "resumes_miss",
                "resume_blocks_wanted", "resume_blocks_resumed",
                "branch_points_advised"});
  PrintTable(
      {{"fork", absl::StrCat(s.resumes_fork)},
       {"adopt", absl::StrCat(s.resumes_adopt)},
       {"tier", absl::StrCat(s.resumes_tier)},
       {"miss", absl::StrCat(s.resumes_miss)},
       {"blocks wanted", absl::StrCat(s.resume_blocks_wanted)},
       {"blocks resumed", absl::StrCat(s.resume_blocks_resumed)},
       {"hit ratio", Percent(s.resume_blocks_resumed, s.resume_blocks_wanted)},
       {"branch points advised", absl::StrCat(s.branch_points_advised)}},
      "  ");
  // Shown while off too: all zero then.
  fields.Shown({"host_tier_capacity_bytes", "host_tier_bytes",
                "host_tier_entries", "host_tier_demotions",
                "host_tier_evictions", "host_tier_demotions_failed",
                "host_tier_promotions_failed"});
  if (s.host_tier_capacity_bytes > 0) {
    std::cout << "host tier\n";
    PrintTable(
        {{"capacity", HumanBytes(s.host_tier_capacity_bytes)},
         {"held", HumanBytes(s.host_tier_bytes)},
         {"entries", absl::StrCat(s.host_tier_entries)},
         {"demotions", absl::StrCat(s.host_tier_demotions)},
         {"evictions", absl::StrCat(s.host_tier_evictions)},
         {"copy failures", absl::StrCat(s.host_tier_demotions_failed, " out, ",
                                        s.host_tier_promotions_failed, " in")}},
        "  ");
  }
  fields.Shown(
      {"warm_restart.outcome", "warm_restart.reason",
       "warm_restart.restored_checkpoints",
       "warm_restart.restored_tier_entries",
       "warm_restart.dropped_bad_checksum", "warm_restart.dropped_unreadable",
       "warm_restart.dropped_no_room", "warm_restart.saves",
       "warm_restart.save_failures", "warm_restart.saved_checkpoints",
       "warm_restart.restore_seconds", "warm_restart.last_save_unix_seconds"});
  if (const WarmRestartStats& w = s.warm_restart;
      !w.outcome.empty() && w.outcome != "off") {
    std::cout << "warm restart (--state_dir)\n";
    PrintTable(
        {{"this start", w.reason.empty()
                            ? w.outcome
                            : absl::StrCat(w.outcome, ": ", w.reason)},
         {"restored",
          absl::StrCat(w.restored_checkpoints, " checkpoints, ",
                       w.restored_tier_entries, " tier entries in ",
                       HumanDuration(absl::Seconds(w.restore_seconds)))},
         {"dropped", absl::StrCat(w.dropped_bad_checksum, " bad checksum, ",
                                  w.dropped_unreadable, " unreadable, ",
                                  w.dropped_no_room, " no room")},
         {"saves",
          absl::StrCat(w.saves, " (", w.save_failures, " failed), ",
                       w.saved_checkpoints, " checkpoints in the last")},
         {"last save",
          w.last_save_unix_seconds > 0
              ? absl::FormatTime("%Y-%m-%d %H:%M:%S",
                                 absl::FromUnixSeconds(static_cast<int64_t>(
                                     w.last_save_unix_seconds)),
                                 absl::LocalTimeZone())
              : "-"}},
        "  ");
  }
  std::cout << "sessions\n";
  fields.Shown({"sessions", "requests", "lease_expiries", "sessions_evicted",
                "draining", "step_channels_open", "step_channels_opened"});
  PrintTable({{"attached", absl::StrCat(s.sessions)},
              {"requests", absl::StrCat(s.requests)},
              {"lease expiries", absl::StrCat(s.lease_expiries)},
              {"evicted", absl::StrCat(s.sessions_evicted)},
              {"draining", s.draining ? "yes" : "no"},
              {"step channels open", absl::StrCat(s.step_channels_open)},
              {"step channels opened", absl::StrCat(s.step_channels_opened)}},
             "  ");
  const std::vector<StatsField> rest = fields.Unshown();
  if (rest.empty()) return;
  std::cout << "more\n";
  std::vector<std::vector<std::string>> rows;
  for (const StatsField& f : rest) {
    rows.push_back({std::string(f.name), FieldText(f)});
  }
  PrintTable(rows, "  ");
}

absl::Status StatsOnce(Client& client, const CommandLine& line) {
  absl::StatusOr<DaemonStats> s = client.GetStats();
  if (!s.ok()) return s.status();
  if (line.json) {
    std::cout << StatsJson(*s).dump(2) << "\n";
  } else {
    PrintStatsTables(*s);
  }
  return absl::OkStatus();
}

// One stats --watch frame: every counter's total and its rate since `prev`
// (none for the first frame, or after the daemon restarted), then every
// gauge.
void PrintWatchFrame(const CommandLine& line, const DaemonStats& s,
                     const std::optional<DaemonStats>& prev,
                     absl::Duration elapsed, int64_t frame, bool restarted,
                     bool tty) {
  const double secs = absl::ToDoubleSeconds(elapsed);
  const std::vector<CounterRate> rates = CounterRates(s, prev, secs);
  const std::optional<double> interval_hit =
      prev.has_value() && secs > 0
          ? Ratio(s.resume_blocks_resumed - prev->resume_blocks_resumed,
                  s.resume_blocks_wanted - prev->resume_blocks_wanted)
          : std::nullopt;
  if (line.json) {
    nlohmann::json out = StatsJson(s);
    out["frame"] = frame;
    out["restarted"] = restarted;
    out["interval_seconds"] = prev.has_value() ? nlohmann::json(secs) : nullptr;
    nlohmann::json& per_second = out["rates"] = nlohmann::json::object();
    for (const CounterRate& r : rates) {
      per_second[std::string(r.name) + "_per_second"] =
          OptionalJson(r.per_second);
    }
    per_second["hit_ratio"] = OptionalJson(interval_hit);
    std::cout << out.dump() << "\n" << std::flush;
    return;
  }
  // On a terminal the frame replaces the previous one; in a pipe or a file
  // frames follow each other, separated by a blank line.
  if (tty) {
    std::cout << "\033[H\033[2J";
  } else if (frame > 1) {
    std::cout << "\n";
  }
  std::cout << absl::StrFormat(
      "statecache %s  %s  every %s  frame %d%s\n", line.address,
      absl::FormatTime("%H:%M:%S", absl::Now(), absl::LocalTimeZone()),
      HumanDuration(line.interval.value_or(absl::Seconds(2))), frame,
      line.count > 0 ? absl::StrCat("/", line.count) : "  (Ctrl-C stops)");
  if (s.draining) std::cout << "DRAINING: not admitting\n";
  if (restarted) {
    std::cout << "the daemon restarted (new epoch): rates start over\n";
  }
  std::vector<std::vector<std::string>> counters = {
      {"counter", "total", "per second"}};
  for (const CounterRate& r : rates) {
    counters.push_back({std::string(r.name), absl::StrCat(r.total),
                        r.per_second.has_value()
                            ? absl::StrFormat("%.1f", *r.per_second)
                            : "-"});
  }
  counters.push_back({"kept - capacity",
                      absl::StrCat(s.checkpoints_kept - s.slots_total), "-"});
  counters.push_back(
      {"hit ratio", Percent(s.resume_blocks_resumed, s.resume_blocks_wanted),
       interval_hit.has_value() ? absl::StrFormat("%.1f%%", 100 * *interval_hit)
                                : "-"});
  PrintTable(counters, "", /*has_header=*/true);
  std::vector<std::vector<std::string>> gauges = {{"gauge", "now"}};
  for (const StatsField& f : StatsFields(s)) {
    if (f.kind == StatsFieldKind::kGauge) {
      gauges.push_back({std::string(f.name), FieldText(f)});
    }
  }
  PrintTable(gauges, "", /*has_header=*/true);
  std::cout << "(hit ratio: blocks resumed / wanted, cumulative and over the "
               "interval; evicted tracking kept - capacity: pool too small; "
               "orphaned rising: KV pool too small)\n"
            << std::flush;
}

absl::Status StatsWatch(Client& client, const CommandLine& line) {
  CatchInterrupts();
  const absl::Duration interval = line.interval.value_or(absl::Seconds(2));
  const bool tty = !line.json && ::isatty(STDOUT_FILENO);
  std::optional<DaemonStats> prev;
  absl::Time prev_time;
  absl::Time next = absl::Now();
  for (int64_t frame = 1; line.count == 0 || frame <= line.count; ++frame) {
    if (SleepUntil(next)) return absl::OkStatus();
    absl::StatusOr<DaemonStats> s = client.GetStats();
    const absl::Time now = absl::Now();
    if (!s.ok()) return s.status();
    // A new epoch: the daemon restarted and its counters started over.
    const bool restarted = prev.has_value() && prev->epoch != s->epoch;
    if (restarted) prev.reset();
    PrintWatchFrame(line, *s, prev, now - prev_time, frame, restarted, tty);
    prev = *s;
    prev_time = now;
    next += interval;
    if (next < now) next = now + interval;  // slow daemon: no catch-up burst
  }
  return absl::OkStatus();
}

absl::Status StatsCommand(Client& client, const CommandLine& line) {
  return line.watch ? StatsWatch(client, line) : StatsOnce(client, line);
}

absl::Status SessionsCommand(Client& client, const CommandLine& line) {
  absl::StatusOr<std::vector<SessionSummary>> sessions = client.ListSessions();
  if (!sessions.ok()) return sessions.status();
  if (line.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const SessionSummary& s : *sessions) {
      list.push_back({{"handle", s.handle},
                      {"principal", s.principal},
                      {"client_name", s.client_name},
                      {"requests", s.requests},
                      {"slots", s.slots},
                      {"pins", s.pins},
                      {"attached_seconds", absl::ToDoubleSeconds(s.attached)},
                      {"idle_seconds", absl::ToDoubleSeconds(s.idle)},
                      {"lease_remaining_ms",
                       absl::ToInt64Milliseconds(s.lease_remaining)}});
    }
    std::cout << nlohmann::json{{"sessions", list}}.dump(2) << "\n";
    return absl::OkStatus();
  }
  if (sessions->empty()) {
    std::cout << "no sessions attached\n";
    return absl::OkStatus();
  }
  std::vector<std::vector<std::string>> rows = {
      {"SESSION", "PRINCIPAL", "CLIENT", "REQUESTS", "SLOTS", "PINS",
       "ATTACHED", "IDLE", "LEASE LEFT"}};
  for (const SessionSummary& s : *sessions) {
    rows.push_back({s.handle, s.principal,
                    s.client_name.empty() ? "-" : s.client_name,
                    absl::StrCat(s.requests), absl::StrCat(s.slots),
                    absl::StrCat(s.pins), HumanDuration(s.attached),
                    HumanDuration(s.idle), HumanDuration(s.lease_remaining)});
  }
  PrintTable(rows, "", /*has_header=*/true);
  return absl::OkStatus();
}

// Polls GetStats while a shrink is pending and prints how far it got: a line
// whenever the pool's size changes, and a reminder when it has not for a
// while. Lines go to `out` (stdout for tables, stderr under --json so stdout
// stays one JSON object).
class ResizeProgress {
 public:
  ResizeProgress(Client& client, int64_t from, int64_t target,
                 absl::Duration interval, std::ostream& out)
      : client_(client),
        from_(from),
        target_(target),
        interval_(interval),
        out_(out),
        thread_([this] { Run(); }) {}
  ~ResizeProgress() { Stop(); }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    int64_t last = -1;
    absl::Time last_line = absl::InfinitePast();
    for (;;) {
      absl::StatusOr<DaemonStats> s = client_.GetStats();
      if (s.ok() && (s->slots_total != last ||
                     absl::Now() - last_line >= kProgressQuietPeriod)) {
        const int64_t left = std::max<int64_t>(0, s->slots_total - target_);
        std::string line = absl::StrFormat(
            "%d -> %d: %d slots left to give up (now %d: %d used, %d held, "
            "%d vacant)",
            from_, target_, left, s->slots_total, s->slots_used, s->slots_held,
            s->slots_vacant);
        if (HasMemory(*s)) {
          absl::StrAppend(&line, ", ", HumanBytes(s->state_bytes),
                          " committed");
        }
        if (s->slots_total == last) {
          absl::StrAppend(&line,
                          "; waiting for pinned or live top slots to be "
                          "released");
        }
        out_ << line << "\n" << std::flush;
        last = s->slots_total;
        last_line = absl::Now();
      }
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, absl::ToChronoNanoseconds(interval_),
                       [this] { return stopping_; })) {
        return;
      }
    }
  }

  Client& client_;
  const int64_t from_;
  const int64_t target_;
  const absl::Duration interval_;
  std::ostream& out_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

absl::Status ResizeCommand(Client& client, const CommandLine& line) {
  int64_t target;
  if (!absl::SimpleAtoi(line.args[1], &target)) {
    return absl::InvalidArgumentError(
        absl::StrCat("resize: not a slot count: ", line.args[1]));
  }
  absl::StatusOr<DaemonStats> before = client.GetStats();
  if (!before.ok()) return before.status();
  const int64_t from = before->slots_total;
  std::ostream& progress_out = line.json ? std::cerr : std::cout;
  const absl::Time start = absl::Now();
  absl::StatusOr<ResizeResult> result;
  if (target < from) {
    progress_out << absl::StrFormat(
                        "shrinking %d -> %d slots (deadline %s): relocating "
                        "live and checkpointed slots off the top\n",
                        from, target, HumanDuration(line.deadline))
                 << std::flush;
    ResizeProgress progress(client, from, target,
                            line.interval.value_or(absl::Seconds(1)),
                            progress_out);
    result = client.Resize(target, line.deadline);
    progress.Stop();
  } else {
    result = client.Resize(target, line.deadline);
  }
  const absl::Duration took = absl::Now() - start;
  if (!result.ok()) {
    if (absl::IsDeadlineExceeded(result.status())) {
      absl::StatusOr<DaemonStats> now = client.GetStats();
      std::cerr << absl::StrFormat(
          "statecachectl: resize: %d -> %d did not finish within %s; the pool "
          "is now %s slots (slots given up so far stay given up)\n",
          from, target, HumanDuration(line.deadline),
          now.ok() ? absl::StrCat(now->slots_total) : "an unknown number of");
    }
    return result.status();
  }
  // The memory the resize took or returned, when the daemon reports it.
  absl::StatusOr<DaemonStats> after = client.GetStats();
  const bool memory = HasMemory(*before) && after.ok() && HasMemory(*after);
  const int64_t freed = memory ? static_cast<int64_t>(before->state_bytes) -
                                     static_cast<int64_t>(after->state_bytes)
                               : 0;
  const char* direction = result->num_slots > from   ? "grow"
                          : result->num_slots < from ? "shrink"
                                                     : "no change";
  if (line.json) {
    std::cout << nlohmann::json{{"num_slots", result->num_slots},
                                {"slots_before", from},
                                {"slots_after", result->num_slots},
                                {"direction", direction},
                                {"relocated", result->relocated},
                                {"evicted", result->evicted},
                                {"seconds", absl::ToDoubleSeconds(took)},
                                {"state_bytes_before",
                                 memory ? nlohmann::json(before->state_bytes)
                                        : nlohmann::json(nullptr)},
                                {"state_bytes_after",
                                 memory ? nlohmann::json(after->state_bytes)
                                        : nlohmann::json(nullptr)},
                                {"state_bytes_freed",
                                 memory ? nlohmann::json(freed)
                                        : nlohmann::json(nullptr)}}
                     .dump(2)
              << "\n";
    return absl::OkStatus();
  }
  std::cout << absl::StrFormat("resized %d -> %d slots (%s, %s)\n", from,
                               result->num_slots, direction, ElapsedText(took));
  std::string memory_text =
      "n/a (the daemon reports no state memory: slot decisions only)";
  if (memory) {
    memory_text =
        absl::StrFormat("%s -> %s (%s)", HumanBytes(before->state_bytes),
                        HumanBytes(after->state_bytes),
                        freed > 0 ? absl::StrCat(HumanBytes(freed), " returned")
                        : freed < 0 ? absl::StrCat(HumanBytes(-freed), " taken")
                                    : std::string("unchanged"));
  }
  PrintTable({{"slots before", absl::StrCat(from)},
              {"slots after", absl::StrCat(result->num_slots)},
              {"relocated", absl::StrCat(result->relocated)},
              {"evicted", absl::StrCat(result->evicted)},
              {"memory", memory_text}},
             "  ");
  return absl::OkStatus();
}

absl::Status DrainCommand(Client& client, const CommandLine& line) {
  absl::StatusOr<DrainResult> drained = client.Drain(line.resume);
  if (!drained.ok()) return drained.status();
  if (line.resume || !line.wait) {
    if (line.json) {
      std::cout << nlohmann::json{{"draining", drained->draining},
                                  {"requests", drained->requests}}
                       .dump(2)
                << "\n";
    } else if (drained->draining) {
      std::cout << absl::StrFormat(
          "draining: not admitting; %d requests still admitted\n",
          drained->requests);
    } else {
      std::cout << absl::StrFormat("admitting again (%d requests admitted)\n",
                                   drained->requests);
    }
    return absl::OkStatus();
  }
  // --wait: poll until the last request is released.
  const absl::Duration timeout = line.timeout.value_or(kDefaultDrainTimeout);
  const absl::Duration interval =
      line.interval.value_or(absl::Milliseconds(500));
  const absl::Time start = absl::Now();
  const absl::Time give_up = start + timeout;
  int64_t requests = drained->requests;
  int64_t printed = -1;
  for (;;) {
    if (requests == 0) break;
    if (!line.json && requests != printed) {
      std::cout << absl::StrFormat(
                       "draining: waiting for %d requests to be released\n",
                       requests)
                << std::flush;
      printed = requests;
    }
    const absl::Time now = absl::Now();
    if (now >= give_up) {
      std::cerr << absl::StrFormat(
          "statecachectl: drain: %d requests still admitted after %s; the "
          "daemon stays draining (drain --resume admits again)\n",
          requests, HumanDuration(timeout));
      if (line.json) {
        std::cout << nlohmann::json{{"draining", true},
                                    {"requests", requests},
                                    {"drained", false},
                                    {"waited_seconds",
                                     absl::ToDoubleSeconds(now - start)}}
                         .dump(2)
                  << "\n";
      }
      return absl::DeadlineExceededError("drain --wait timed out");
    }
    absl::SleepFor(std::min(interval, give_up - now));
    absl::StatusOr<DaemonStats> s = client.GetStats();
    if (!s.ok()) return s.status();
    requests = s->requests;
  }
  const absl::Duration waited = absl::Now() - start;
  if (line.json) {
    std::cout << nlohmann::json{{"draining", true},
                                {"requests", 0},
                                {"drained", true},
                                {"waited_seconds",
                                 absl::ToDoubleSeconds(waited)}}
                     .dump(2)
              << "\n";
  } else {
    std::cout << absl::StrFormat(
        "drained: no requests left after %s; not admitting until drain "
        "--resume\n",
        ElapsedText(waited));
  }
  return absl::OkStatus();
}

absl::Status EvictCommand(Client& client, const CommandLine& line) {
  absl::StatusOr<int32_t> released = client.EvictSession(line.args[1]);
  if (!released.ok()) return released.status();
  if (line.json) {
    std::cout << nlohmann::json{{"handle", line.args[1]},
                                {"requests_released", *released}}
                     .dump(2)
              << "\n";
    return absl::OkStatus();
  }
  std::cout << "evicted " << line.args[1] << ": " << *released
            << " requests released\n";
  return absl::OkStatus();
}

absl::Status TierCommand(Client& client, const CommandLine& line) {
  int64_t bytes = 0;
  if (!absl::SimpleAtoi(line.args[1], &bytes) || bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tier: not a byte count: ", line.args[1]));
  }
  absl::StatusOr<int64_t> room = client.ResizeHostTier(bytes);
  if (!room.ok()) return room.status();
  if (line.json) {
    std::cout << nlohmann::json{{"host_tier_bytes", *room}}.dump(2) << "\n";
    return absl::OkStatus();
  }
  std::cout << (*room == 0 ? std::string("host tier off")
                           : absl::StrCat("host tier: ", HumanBytes(*room)))
            << "\n";
  return absl::OkStatus();
}

}  // namespace

const std::vector<Command>& Commands() {
  static const auto* commands = new std::vector<Command>{
      {"status", 0, &StatusCommand, {}},
      {"stats", 0, &StatsCommand, {"watch", "interval", "count"}},
      {"sessions", 0, &SessionsCommand, {}},
      {"resize", 1, &ResizeCommand, {"deadline", "interval"}},
      {"drain", 0, &DrainCommand, {"wait", "resume", "interval"}},
      {"evict", 1, &EvictCommand, {}},
      {"tier", 1, &TierCommand, {}},
  };
  return *commands;
}

}  // namespace statecache::ctl
