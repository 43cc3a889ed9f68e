// statecachectl: the operator's command-line tool for statecached.
//
//   statecachectl [--address=ADDR] [--json] [--timeout=DURATION]
//                 [--tls_ca=FILE] [--tls_cert=FILE --tls_key=FILE]
//                 [--tls_server_name=NAME] COMMAND ...
//
//   status                      epoch, uptime, slots, sessions at a glance
//   stats [--watch]             checkpoint fates, occupancy, resumes; --watch
//                               refreshes a table of rates until Ctrl-C
//   sessions                    attached sessions, one row each
//   resize N [--deadline=30s]   grow or shrink the pool to N slots, with
//                               progress while a shrink gives slots up
//   tier BYTES                  set the host tier's room (0: off)
//   drain [--wait]              stop admitting (and wait for requests to end)
//   drain --resume              admit again
//   evict HANDLE                end a session (its handle, from `sessions`)
//                               as if its lease had lapsed
//
// Output is an aligned table for people, or JSON with --json (one object; one
// object per line for stats --watch).
//
// A daemon serving a TCP --address over TLS (its --tls_cert; mutual TLS with
// its --tls_client_ca) is reached with the --tls_* flags: any of them turns
// TLS on (statecache::TlsOptions).
//
// Exit codes (scripts rely on them; kUsage below prints them too):
//   0 ok; 1 the daemon refused or an RPC failed; 2 usage error (nothing
//   sent); 3 timed out (drain --wait past --timeout, resize past
//   --deadline); 4 the daemon is unreachable (no connection at --address).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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
#include "client/default_address.h"
#include "client/statecache_client.h"
#include "nlohmann/json.hpp"

namespace statecache {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitRpcError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitTimeout = 3;
constexpr int kExitUnreachable = 4;

// Per-call deadline unless --timeout says otherwise.
constexpr absl::Duration kDefaultCallTimeout = absl::Seconds(5);
// How long drain --wait waits unless --timeout says otherwise.
constexpr absl::Duration kDefaultDrainTimeout = absl::Seconds(60);
// Without any change, resize progress repeats itself this often.
constexpr absl::Duration kProgressQuietPeriod = absl::Seconds(5);

constexpr char kUsage[] =
    R"(usage: statecachectl [--address=ADDR] [--json] [--timeout=DURATION] COMMAND

commands:
  status                      epoch, uptime, slots and sessions at a glance
  stats                       checkpoint fates, occupancy and resumes
  stats --watch [--interval=2s] [--count=N]
                              a table of totals and rates per second (kept/s,
                              evicted/s, orphaned/s, hit ratio over the
                              interval), refreshed until Ctrl-C or N frames
  sessions                    attached sessions, one row each
  resize N [--deadline=30s] [--interval=1s]
                              grow or shrink the pool to N slots; a shrink
                              prints progress while slots are given up, then
                              what moved and what was evicted
  tier BYTES                  set the host tier's room for evicted
                              checkpoints, at once (0 turns it off); keeps
                              the most recent that fit
  drain [--wait] [--timeout=60s] [--interval=500ms]
                              stop admitting (Attach and admit are refused);
                              --wait: until no request is left
  drain --resume              admit again
  evict HANDLE                end a session (its handle, from `sessions`)
                              as if its lease had lapsed

flags:
  --address=ADDR      the daemon (default: )";

constexpr char kUsageTail[] =
    R"()
  --json              JSON instead of tables (stats --watch: one object a line)
  --timeout=DURATION  per-call deadline (default 5s); for drain --wait, how
                      long to wait for the requests to finish (default 60s)
  --deadline=DURATION resize: how long the daemon may take (default 30s)
  --interval=DURATION stats --watch: refresh period (default 2s); resize and
                      drain --wait: polling period (default 1s, 500ms)
  --count=N           stats --watch: stop after N frames (default: Ctrl-C)

TLS, for a daemon serving a TCP --address with --tls_cert (any --tls_* flag
turns TLS on; without one a TCP address is plaintext, for --insecure_tcp):
  --tls_ca=FILE       PEM CA certificate(s) the daemon's certificate must
                      chain to (default: the system's roots)
  --tls_cert=FILE     PEM client certificate, for a daemon with
                      --tls_client_ca (your principal: x509:NAME, its name)
  --tls_key=FILE      the private key of --tls_cert (both or neither)
  --tls_server_name=NAME
                      the name the daemon's certificate carries, when it is
                      not --address's host

exit codes:
  0  ok (also: stats --watch stopped by Ctrl-C)
  1  the daemon refused the call or an RPC failed (message on stderr)
  2  usage error (nothing was sent)
  3  timed out: drain --wait past --timeout (the daemon stays draining),
     resize past --deadline (the slots given up so far stay given up)
  4  the daemon is unreachable: nothing accepted a connection at the address
     (over TLS: or the handshake failed; the message says why)
)";

struct CommandLine {
  std::string address = DefaultAddress();
  // --tls_ca, --tls_cert, --tls_key, --tls_server_name ("": not given).
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_server_name;
  bool json = false;
  std::optional<absl::Duration> timeout;
  absl::Duration deadline = absl::Seconds(30);
  std::optional<absl::Duration> interval;
  int64_t count = 0;  // stats --watch frames; 0 = until Ctrl-C
  bool watch = false;
  bool wait = false;
  bool resume = false;
  // Flags given, by name, to check they fit the command.
  std::vector<std::string> given;
  std::vector<std::string> args;  // command and its operands

  bool Given(absl::string_view flag) const {
    return std::find(given.begin(), given.end(), flag) != given.end();
  }
  absl::Duration CallTimeout() const {
    return timeout.value_or(kDefaultCallTimeout);
  }
  bool Tls() const {
    return Given("tls_ca") || Given("tls_cert") || Given("tls_key") ||
           Given("tls_server_name");
  }
};

bool IsTlsFlag(absl::string_view name) {
  return name == "tls_ca" || name == "tls_cert" || name == "tls_key" ||
         name == "tls_server_name";
}

void PrintUsage(std::ostream& out) {
  out << kUsage << DefaultAddress() << kUsageTail;
}

// After a usage error: the error, then where the full usage is.
void UsageError(absl::string_view message) {
  std::cerr << "statecachectl: " << message << "\n"
            << "usage: statecachectl [--address=ADDR] [--json] "
               "[--timeout=DURATION] [--tls_*=...] COMMAND (statecachectl "
               "--help lists commands, flags and exit codes)\n";
}

// Parses argv. Flags may come before or after the command; "--" ends them.
// Errors: INVALID_ARGUMENT naming the bad argument; CANCELLED for --help.
absl::StatusOr<CommandLine> ParseCommandLine(int argc, char** argv) {
  CommandLine line;
  bool flags_done = false;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (flags_done || !absl::StartsWith(arg, "-") || arg == "-") {
      line.args.emplace_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      return absl::CancelledError("help");
    }
    absl::string_view name = arg.substr(arg.find_first_not_of('-'));
    std::optional<absl::string_view> value;
    if (auto eq = name.find('='); eq != absl::string_view::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (name == "json" || name == "watch" || name == "wait" ||
        name == "resume") {
      if (value.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " takes no value"));
      }
      (name == "json"    ? line.json
       : name == "watch" ? line.watch
       : name == "wait"  ? line.wait
                         : line.resume) = true;
      line.given.emplace_back(name);
      continue;
    }
    if (name != "address" && name != "timeout" && name != "deadline" &&
        name != "interval" && name != "count" && !IsTlsFlag(name)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", arg));
    }
    if (!value.has_value()) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(absl::StrCat(arg, " needs a value"));
      }
      value = argv[++i];
    }
    line.given.emplace_back(name);
    if (name == "address") {
      line.address = std::string(*value);
    } else if (IsTlsFlag(name)) {
      if (value->empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " needs a value"));
      }
      (name == "tls_ca"     ? line.tls_ca
       : name == "tls_cert" ? line.tls_cert
       : name == "tls_key"  ? line.tls_key
                            : line.tls_server_name) = std::string(*value);
    } else if (name == "count") {
      if (!absl::SimpleAtoi(*value, &line.count) || line.count < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("--count: not a positive number: ", *value));
      }
    } else {
      absl::Duration duration;
      if (!absl::ParseDuration(*value, &duration) ||
          duration <= absl::ZeroDuration()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, ": not a positive duration: ", *value));
      }
      if (name == "timeout") {
        line.timeout = duration;
      } else if (name == "deadline") {
        line.deadline = duration;
      } else {
        line.interval = duration;
      }
    }
  }
  if (line.args.empty()) return absl::InvalidArgumentError("no command");
  return line;
}

// ------------------------------------------------------------ formatting

std::string HumanDuration(absl::Duration d) {
  return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(100)));
}

// For how long something took: "412us", "12ms", "1.5s".
std::string ElapsedText(absl::Duration d) {
  const absl::Duration unit = d < absl::Milliseconds(1) ? absl::Microseconds(1)
                              : d < absl::Seconds(1)    ? absl::Milliseconds(1)
                                                     : absl::Milliseconds(100);
  return absl::FormatDuration(absl::Trunc(d, unit));
}

// Prints rows as columns padded to the widest cell. A column whose cells
// (below the header row, if any) are all numbers is right-aligned.
void PrintTable(const std::vector<std::vector<std::string>>& rows,
                absl::string_view indent = "", bool has_header = false) {
  std::vector<size_t> widths;
  std::vector<bool> numeric;
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto& row = rows[r];
    if (widths.size() < row.size()) {
      widths.resize(row.size(), 0);
      numeric.resize(row.size(), true);
    }
    for (size_t c = 0; c < row.size(); ++c) {
      widths[c] = std::max(widths[c], row[c].size());
      double unused;
      absl::string_view cell = row[c];
      absl::ConsumeSuffix(&cell, "%");
      if (!(has_header && r == 0) && !absl::SimpleAtod(cell, &unused) &&
          cell != "-") {
        numeric[c] = false;
      }
    }
  }
  for (const auto& row : rows) {
    std::string line(indent);
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(widths[c] - row[c].size(), ' ');
      if (c > 0) line += "  ";
      if (numeric[c]) {
        absl::StrAppend(&line, pad, row[c]);
      } else if (c + 1 < row.size()) {
        absl::StrAppend(&line, row[c], pad);
      } else {
        line += row[c];  // no trailing blanks
      }
    }
    std::cout << line << "\n";
  }
}

std::string TransferText(const TransferConfig& transfer) {
  std::string text = transfer.kind;
  if (transfer.kind == "fork") {
    absl::StrAppend(&text, "(", transfer.fork_tokens, ")");
  }
  if (transfer.readable_midstep) text += ", readable midstep";
  return text;
}

nlohmann::json TransferJson(const TransferConfig& transfer) {
  return {{"kind", transfer.kind},
          {"fork_tokens", transfer.fork_tokens},
          {"readable_midstep", transfer.readable_midstep}};
}

nlohmann::json IdentityJson(const ModelIdentity& identity) {
  return {{"model_id", identity.model_id},
          {"hash_block_size", identity.hash_block_size},
          {"hash_namespace", identity.hash_namespace},
          {"num_spec", identity.num_spec}};
}

// "85.0%", or "-" when there is nothing to divide by.
std::string Percent(int64_t part, int64_t whole) {
  if (whole <= 0) return "-";
  return absl::StrFormat(
      "%.1f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

std::optional<double> Ratio(int64_t part, int64_t whole) {
  if (whole <= 0) return std::nullopt;
  return static_cast<double>(part) / static_cast<double>(whole);
}

nlohmann::json OptionalJson(const std::optional<double>& v) {
  return v.has_value() ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// "1.50 GiB": binary units, as memory is allocated.
std::string HumanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrCat(bytes, " B")
                   : absl::StrFormat("%.2f %s", value, kUnits[unit]);
}

// Whether the daemon has state memory and says how much (a daemon without
// it reports backend "none"; one from before the field, nothing).
bool HasMemory(const DaemonStats& s) {
  return !s.backend.empty() && s.backend != "none";
}

nlohmann::json MemoryJson(const DaemonStats& s) {
  if (!HasMemory(s)) return nullptr;
  return {{"backend", s.backend},
          {"state_bytes", s.state_bytes},
          {"layout_name", s.layout_name},
          {"bytes_per_slot", s.bytes_per_slot},
          {"max_slots", s.max_slots}};
}

std::string MemoryText(const DaemonStats& s) {
  if (!HasMemory(s)) return "none (slot decisions only: no state memory)";
  std::string text = absl::StrFormat("%s committed on %s",
                                     HumanBytes(s.state_bytes), s.backend);
  if (!s.layout_name.empty())
    absl::StrAppend(&text, ", layout ", s.layout_name);
  if (s.bytes_per_slot > 0) {
    absl::StrAppend(&text, ", ", HumanBytes(s.bytes_per_slot), " per slot");
  }
  // 2^30 is the pool's own limit: no --max_slots given.
  if (s.max_slots > 0 && s.max_slots < (int64_t{1} << 30)) {
    absl::StrAppend(&text, ", at most ", s.max_slots, " slots");
  }
  return text;
}

// ------------------------------------------------------------ Ctrl-C

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

// ------------------------------------------------------------ commands

absl::Status StatusCommand(Client& client, const CommandLine& line) {
  absl::StatusOr<DaemonStats> stats = client.GetStats();
  if (!stats.ok()) return stats.status();
  if (line.json) {
    nlohmann::json out = {
        {"address", line.address},
        {"epoch", stats->epoch},
        {"uptime_seconds", absl::ToDoubleSeconds(stats->uptime)},
        {"slots",
         {{"total", stats->slots_total},
          {"used", stats->slots_used},
          {"held", stats->slots_held},
          {"vacant", stats->slots_vacant},
          {"quarantined", stats->slots_quarantined}}},
        {"sessions", stats->sessions},
        {"requests", stats->requests},
        {"draining", stats->draining},
        {"memory", MemoryJson(*stats)},
        {"indexed_hashes", stats->indexed_hashes},
        {"transfer", TransferJson(stats->transfer)},
        {"identity", IdentityJson(stats->identity)}};
    std::cout << out.dump(2) << "\n";
    return absl::OkStatus();
  }
  const ModelIdentity& id = stats->identity;
  PrintTable({
      {"address", line.address},
      {"epoch", absl::StrCat(stats->epoch)},
      {"uptime", HumanDuration(stats->uptime)},
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

nlohmann::json StatsJson(const DaemonStats& s) {
  return {{"epoch", s.epoch},
          {"uptime_seconds", absl::ToDoubleSeconds(s.uptime)},
          {"checkpoints",
           {{"kept", s.checkpoints_kept},
            {"dropped", s.checkpoints_dropped},
            {"evicted", s.checkpoints_evicted},
            {"orphaned", s.checkpoints_orphaned},
            {"indexed", s.indexed_hashes}}},
          {"slots",
           {{"total", s.slots_total},
            {"used", s.slots_used},
            {"held", s.slots_held},
            {"vacant", s.slots_vacant},
            {"quarantined", s.slots_quarantined}}},
          {"resumes",
           {{"fork", s.resumes_fork},
            {"adopt", s.resumes_adopt},
            {"tier", s.host_tier.resumes},
            {"miss", s.resumes_miss}}},
          {"host_tier",
           {{"capacity_bytes", s.host_tier.capacity_bytes},
            {"held_bytes", s.host_tier.held_bytes},
            {"entries", s.host_tier.entries},
            {"demotions", s.host_tier.demotions},
            {"evictions", s.host_tier.evictions},
            {"demotions_failed", s.host_tier.demotions_failed},
            {"promotions_failed", s.host_tier.promotions_failed}}},
          {"resume_blocks",
           {{"wanted", s.resume_blocks_wanted},
            {"resumed", s.resume_blocks_resumed},
            {"hit_ratio", OptionalJson(Ratio(s.resume_blocks_resumed,
                                             s.resume_blocks_wanted))}}},
          {"sessions",
           {{"attached", s.sessions},
            {"requests", s.requests},
            {"lease_expiries", s.lease_expiries},
            {"evicted", s.sessions_evicted}}},
          {"draining", s.draining},
          {"warm_restart",
           {{"outcome", s.warm_restart.outcome},
            {"reason", s.warm_restart.reason},
            {"restored_checkpoints", s.warm_restart.restored_checkpoints},
            {"restored_tier_entries", s.warm_restart.restored_tier_entries},
            {"dropped_bad_checksum", s.warm_restart.dropped_bad_checksum},
            {"dropped_no_room", s.warm_restart.dropped_no_room},
            {"dropped_unreadable", s.warm_restart.dropped_unreadable},
            {"restore_seconds", s.warm_restart.restore_seconds},
            {"saves", s.warm_restart.saves},
            {"save_failures", s.warm_restart.save_failures},
            {"saved_checkpoints", s.warm_restart.saved_checkpoints}}},
          {"memory", MemoryJson(s)}};
}

absl::Status StatsOnce(Client& client, const CommandLine& line) {
  absl::StatusOr<DaemonStats> s = client.GetStats();
  if (!s.ok()) return s.status();
  if (line.json) {
    std::cout << StatsJson(*s).dump(2) << "\n";
    return absl::OkStatus();
  }
  // The capacity reading from the reference's checkpoint_fates: evictions
  // tracking `kept - slots` means the pool is too small.
  std::cout << "checkpoints (cumulative)\n";
  PrintTable(
      {{"kept", absl::StrCat(s->checkpoints_kept)},
       {"dropped", absl::StrCat(s->checkpoints_dropped)},
       {"evicted", absl::StrCat(s->checkpoints_evicted)},
       {"orphaned", absl::StrCat(s->checkpoints_orphaned)},
       {"kept - slots", absl::StrCat(s->checkpoints_kept - s->slots_total)},
       {"indexed now", absl::StrCat(s->indexed_hashes)}},
      "  ");
  std::cout << "slots (now)\n";
  PrintTable({{"total", absl::StrCat(s->slots_total)},
              {"used", absl::StrCat(s->slots_used)},
              {"held", absl::StrCat(s->slots_held)},
              {"vacant", absl::StrCat(s->slots_vacant)},
              {"quarantined (in used)", absl::StrCat(s->slots_quarantined)}},
             "  ");
  std::cout << "resumes (cumulative)\n";
  PrintTable({{"fork", absl::StrCat(s->resumes_fork)},
              {"adopt", absl::StrCat(s->resumes_adopt)},
              {"tier", absl::StrCat(s->host_tier.resumes)},
              {"miss", absl::StrCat(s->resumes_miss)},
              {"blocks wanted", absl::StrCat(s->resume_blocks_wanted)},
              {"blocks resumed", absl::StrCat(s->resume_blocks_resumed)},
              {"hit ratio",
               Percent(s->resume_blocks_resumed, s->resume_blocks_wanted)}},
             "  ");
  if (s->host_tier.capacity_bytes > 0) {
    const HostTierStats& t = s->host_tier;
    std::cout << "host tier\n";
    PrintTable({{"capacity", HumanBytes(t.capacity_bytes)},
                {"held", HumanBytes(t.held_bytes)},
                {"entries", absl::StrCat(t.entries)},
                {"demotions", absl::StrCat(t.demotions)},
                {"evictions", absl::StrCat(t.evictions)},
                {"copy failures", absl::StrCat(t.demotions_failed, " out, ",
                                               t.promotions_failed, " in")}},
               "  ");
  }
  if (const WarmRestartStats& w = s->warm_restart;
      !w.outcome.empty() && w.outcome != "off") {
    std::cout << "warm restart (--state_dir)\n";
    PrintTable(
        {{"this start", w.reason.empty()
                            ? w.outcome
                            : absl::StrCat(w.outcome, ": ", w.reason)},
         {"restored", absl::StrCat(w.restored_checkpoints, " checkpoints, ",
                                   w.restored_tier_entries, " tier entries")},
         {"dropped", absl::StrCat(w.dropped_bad_checksum, " bad checksum, ",
                                  w.dropped_unreadable, " unreadable, ",
                                  w.dropped_no_room, " no room")},
         {"saves",
          absl::StrCat(w.saves, " (", w.save_failures, " failed), ",
                       w.saved_checkpoints, " checkpoints in the last")}},
        "  ");
  }
  std::cout << "sessions\n";
  PrintTable({{"attached", absl::StrCat(s->sessions)},
              {"requests", absl::StrCat(s->requests)},
              {"lease expiries", absl::StrCat(s->lease_expiries)},
              {"evicted", absl::StrCat(s->sessions_evicted)},
              {"draining", s->draining ? "yes" : "no"}},
             "  ");
  return absl::OkStatus();
}

// One stats --watch frame: totals now and rates since `prev` (none for the
// first frame, or after the daemon restarted).
void PrintWatchFrame(const CommandLine& line, const DaemonStats& s,
                     const std::optional<DaemonStats>& prev,
                     absl::Duration elapsed, int64_t frame, bool restarted,
                     bool tty) {
  const double secs = absl::ToDoubleSeconds(elapsed);
  const bool rates = prev.has_value() && secs > 0;
  auto delta = [&](int64_t DaemonStats::*field) -> int64_t {
    return rates ? s.*field - (*prev).*field : 0;
  };
  auto rate = [&](int64_t DaemonStats::*field) -> std::optional<double> {
    if (!rates) return std::nullopt;
    return static_cast<double>(delta(field)) / secs;
  };
  const std::optional<double> interval_hit =
      rates ? Ratio(delta(&DaemonStats::resume_blocks_resumed),
                    delta(&DaemonStats::resume_blocks_wanted))
            : std::nullopt;
  if (line.json) {
    nlohmann::json out = StatsJson(s);
    out["frame"] = frame;
    out["restarted"] = restarted;
    out["interval_seconds"] = rates ? nlohmann::json(secs) : nullptr;
    out["rates"] = {
        {"kept_per_second", OptionalJson(rate(&DaemonStats::checkpoints_kept))},
        {"evicted_per_second",
         OptionalJson(rate(&DaemonStats::checkpoints_evicted))},
        {"orphaned_per_second",
         OptionalJson(rate(&DaemonStats::checkpoints_orphaned))},
        {"dropped_per_second",
         OptionalJson(rate(&DaemonStats::checkpoints_dropped))},
        {"resumes_per_second",
         OptionalJson(rates ? std::optional<double>(
                                  static_cast<double>(
                                      delta(&DaemonStats::resumes_fork) +
                                      delta(&DaemonStats::resumes_adopt) +
                                      delta(&DaemonStats::resumes_miss)) /
                                  secs)
                            : std::nullopt)},
        {"hit_ratio", OptionalJson(interval_hit)}};
    std::cout << out.dump() << "\n" << std::flush;
    return;
  }
  auto per_second = [&](int64_t DaemonStats::*field) {
    std::optional<double> r = rate(field);
    return r.has_value() ? absl::StrFormat("%.1f", *r) : std::string("-");
  };
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
  PrintTable(
      {{"checkpoints", "total", "per second"},
       {"kept", absl::StrCat(s.checkpoints_kept),
        per_second(&DaemonStats::checkpoints_kept)},
       {"evicted", absl::StrCat(s.checkpoints_evicted),
        per_second(&DaemonStats::checkpoints_evicted)},
       {"orphaned", absl::StrCat(s.checkpoints_orphaned),
        per_second(&DaemonStats::checkpoints_orphaned)},
       {"dropped", absl::StrCat(s.checkpoints_dropped),
        per_second(&DaemonStats::checkpoints_dropped)},
       {"kept - capacity", absl::StrCat(s.checkpoints_kept - s.slots_total),
        "-"},
       {"resumes fork", absl::StrCat(s.resumes_fork),
        per_second(&DaemonStats::resumes_fork)},
       {"resumes adopt", absl::StrCat(s.resumes_adopt),
        per_second(&DaemonStats::resumes_adopt)},
       {"resumes miss", absl::StrCat(s.resumes_miss),
        per_second(&DaemonStats::resumes_miss)},
       {"hit ratio", Percent(s.resume_blocks_resumed, s.resume_blocks_wanted),
        interval_hit.has_value()
            ? absl::StrFormat("%.1f%%", 100 * *interval_hit)
            : "-"}},
      "", /*has_header=*/true);
  PrintTable({{"slots", "total", "used", "held", "vacant"},
              {"now", absl::StrCat(s.slots_total), absl::StrCat(s.slots_used),
               absl::StrCat(s.slots_held), absl::StrCat(s.slots_vacant)}},
             "", /*has_header=*/true);
  std::cout << absl::StrFormat(
      "sessions %d, requests %d, lease expiries %d, evicted %d\n", s.sessions,
      s.requests, s.lease_expiries, s.sessions_evicted);
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

struct Command {
  absl::string_view name;
  size_t operands;
  absl::Status (*run)(Client&, const CommandLine&);
  // Command-specific flags it accepts (address, json, timeout: all do).
  std::vector<absl::string_view> flags;
};

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

bool IsUnixAddress(absl::string_view address) {
  return absl::StartsWith(address, "unix:") ||
         absl::StartsWith(address, "unix-abstract:");
}

// Flags that fit the command but not each other. Empty when fine.
std::string FlagConflict(const Command& command, const CommandLine& line) {
  for (const std::string& flag : line.given) {
    if (flag == "address" || flag == "json" || flag == "timeout" ||
        IsTlsFlag(flag)) {
      continue;
    }
    if (std::find(command.flags.begin(), command.flags.end(), flag) ==
        command.flags.end()) {
      return absl::StrCat(command.name, " takes no --", flag);
    }
  }
  if (command.name == "stats" && !line.watch &&
      (line.Given("interval") || line.Given("count"))) {
    return "--interval and --count go with stats --watch";
  }
  if (command.name == "drain") {
    if (line.resume && line.wait) return "drain takes --wait or --resume";
    if (!line.wait && line.Given("interval")) {
      return "--interval goes with drain --wait";
    }
  }
  return "";
}

int Main(int argc, char** argv) {
  absl::StatusOr<CommandLine> line = ParseCommandLine(argc, argv);
  if (absl::IsCancelled(line.status())) {  // --help
    PrintUsage(std::cout);
    return kExitOk;
  }
  if (!line.ok()) {
    UsageError(line.status().message());
    return kExitUsage;
  }
  const Command* command = nullptr;
  for (const Command& candidate : Commands()) {
    if (candidate.name == line->args[0]) command = &candidate;
  }
  if (command == nullptr) {
    UsageError(absl::StrCat("unknown command ", line->args[0]));
    return kExitUsage;
  }
  if (line->args.size() != command->operands + 1) {
    UsageError(absl::StrCat(command->name, " takes ", command->operands,
                            " operand(s)"));
    return kExitUsage;
  }
  if (std::string conflict = FlagConflict(*command, *line); !conflict.empty()) {
    UsageError(conflict);
    return kExitUsage;
  }
  if (command->name == "resize") {
    int64_t target;
    if (!absl::SimpleAtoi(line->args[1], &target)) {
      UsageError(absl::StrCat("resize: not a slot count: ", line->args[1]));
      return kExitUsage;
    }
  }

  ClientOptions options;
  // drain's --timeout bounds the wait; each call keeps the usual deadline.
  options.rpc_timeout = command->name == "drain"
                            ? std::min(line->CallTimeout(), kDefaultCallTimeout)
                            : line->CallTimeout();
  options.connect_timeout = options.rpc_timeout;
  options.keepalive = false;
  if (line->Tls()) {
    if (line->tls_cert.empty() != line->tls_key.empty()) {
      UsageError("--tls_cert and --tls_key go together: give both or neither");
      return kExitUsage;
    }
    if (IsUnixAddress(line->address)) {
      UsageError(absl::StrCat(
          "the --tls_* flags are for a TCP --address; ", line->address,
          " is a Unix socket, which statecached serves in plaintext"));
      return kExitUsage;
    }
    absl::StatusOr<TlsOptions> tls = TlsOptions::FromFiles(
        line->tls_ca, line->tls_cert, line->tls_key, line->tls_server_name);
    if (!tls.ok()) {
      std::cerr << "statecachectl: " << tls.status().message() << "\n";
      return kExitUsage;
    }
    options.tls = *std::move(tls);
  }
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Connect(line->address, options);
  if (!client.ok()) {
    std::cerr << "statecachectl: " << command->name << ": "
              << absl::StatusCodeToString(client.status().code()) << ": "
              << client.status().message()
              << (line->Tls()
                      ? " (is statecached running there with --tls_cert? "
                        "does its certificate chain to --tls_ca and name "
                        "--address's host or --tls_server_name? with "
                        "--tls_client_ca, does it take --tls_cert?)\n"
                  : IsUnixAddress(line->address)
                      ? " (is statecached running? --address or "
                        "$XDG_RUNTIME_DIR picks the socket)\n"
                      : " (is statecached running? over TCP it serves TLS "
                        "unless started with --insecure_tcp: give --tls_ca, "
                        "and --tls_cert and --tls_key if it has "
                        "--tls_client_ca)\n");
    return absl::IsUnavailable(client.status()) ? kExitUnreachable
                                                : kExitRpcError;
  }
  absl::Status status = command->run(**client, *line);
  if (!status.ok()) {
    std::cerr << "statecachectl: " << command->name << ": "
              << absl::StatusCodeToString(status.code()) << ": "
              << status.message() << "\n";
    const bool waits =
        command->name == "resize" || (command->name == "drain" && line->wait);
    return waits && absl::IsDeadlineExceeded(status) ? kExitTimeout
                                                     : kExitRpcError;
  }
  return kExitOk;
}

}  // namespace
}  // namespace statecache

int main(int argc, char** argv) {
  const int code = statecache::Main(argc, argv);
  // Out without running static destructors: after a refused TLS handshake
  // gRPC's threads may still be tearing the attempt down, and destroying
  // its globals under them crashed the exit now and then (SIGSEGV after
  // the message was printed). Nothing is left to flush but the streams.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}
