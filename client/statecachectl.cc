// statecachectl: the operator's command-line tool for statecached.
//
//   statecachectl [--address=ADDR] [--json] [--timeout=DURATION] COMMAND ...
//
//   status                      epoch, uptime, slots, sessions at a glance
//   stats                       checkpoint fates, occupancy, resumes
//   sessions                    attached sessions, one row each
//   resize N [--deadline=30s]   grow or shrink the pool to N slots
//   evict SESSION               end a session as if its lease had lapsed
//
// Output is an aligned table for people, or one JSON object with --json.
// Exit codes: 0 ok, 1 the daemon could not be reached or refused (message on
// stderr), 2 usage error.
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/default_address.h"
#include "client/statecache_client.h"
#include "nlohmann/json.hpp"

namespace statecache {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitRpcError = 1;
constexpr int kExitUsage = 2;

constexpr char kUsage[] =
    R"(usage: statecachectl [--address=ADDR] [--json] [--timeout=DURATION] COMMAND

commands:
  status                      epoch, uptime, slots and sessions at a glance
  stats                       checkpoint fates, occupancy and resumes
  sessions                    attached sessions, one row each
  resize N [--deadline=30s]   grow or shrink the pool to N slots
  evict SESSION               end a session as if its lease had lapsed

flags:
  --address=ADDR      the daemon (default: )";

struct CommandLine {
  std::string address = DefaultAddress();
  bool json = false;
  absl::Duration timeout = absl::Seconds(5);
  absl::Duration deadline = absl::Seconds(30);
  std::vector<std::string> args;  // command and its operands
};

void PrintUsage(std::ostream& out) {
  out << kUsage << DefaultAddress() << ")\n"
      << "  --json              print one JSON object\n"
      << "  --timeout=DURATION  per-call deadline (default 5s)\n"
      << "  --deadline=DURATION resize: how long the daemon may take "
         "(default 30s)\n";
}

// Parses argv. Flags may come before or after the command; "--" ends them.
// Errors: INVALID_ARGUMENT naming the bad argument.
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
    if (name == "json") {
      if (value.has_value()) {
        return absl::InvalidArgumentError("--json takes no value");
      }
      line.json = true;
      continue;
    }
    if (name != "address" && name != "timeout" && name != "deadline") {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", arg));
    }
    if (!value.has_value()) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(absl::StrCat(arg, " needs a value"));
      }
      value = argv[++i];
    }
    if (name == "address") {
      line.address = std::string(*value);
    } else {
      absl::Duration duration;
      if (!absl::ParseDuration(*value, &duration) ||
          duration <= absl::ZeroDuration()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, ": not a positive duration: ", *value));
      }
      (name == "timeout" ? line.timeout : line.deadline) = duration;
    }
  }
  if (line.args.empty()) return absl::InvalidArgumentError("no command");
  return line;
}

// ------------------------------------------------------------ formatting

std::string HumanDuration(absl::Duration d) {
  return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(100)));
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
      if (!(has_header && r == 0) && !absl::SimpleAtod(row[c], &unused)) {
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
          {"vacant", stats->slots_vacant}}},
        {"sessions", stats->sessions},
        {"requests", stats->requests},
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
      {"slots", absl::StrFormat("%d total: %d used, %d held, %d vacant",
                                stats->slots_total, stats->slots_used,
                                stats->slots_held, stats->slots_vacant)},
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

absl::Status StatsCommand(Client& client, const CommandLine& line) {
  absl::StatusOr<DaemonStats> s = client.GetStats();
  if (!s.ok()) return s.status();
  if (line.json) {
    nlohmann::json out = {{"epoch", s->epoch},
                          {"uptime_seconds", absl::ToDoubleSeconds(s->uptime)},
                          {"checkpoints",
                           {{"kept", s->checkpoints_kept},
                            {"dropped", s->checkpoints_dropped},
                            {"evicted", s->checkpoints_evicted},
                            {"orphaned", s->checkpoints_orphaned},
                            {"indexed", s->indexed_hashes}}},
                          {"slots",
                           {{"total", s->slots_total},
                            {"used", s->slots_used},
                            {"held", s->slots_held},
                            {"vacant", s->slots_vacant}}},
                          {"resumes",
                           {{"fork", s->resumes_fork},
                            {"adopt", s->resumes_adopt},
                            {"miss", s->resumes_miss}}},
                          {"sessions",
                           {{"attached", s->sessions},
                            {"requests", s->requests},
                            {"lease_expiries", s->lease_expiries},
                            {"evicted", s->sessions_evicted}}}};
    std::cout << out.dump(2) << "\n";
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
              {"vacant", absl::StrCat(s->slots_vacant)}},
             "  ");
  std::cout << "resumes (cumulative)\n";
  PrintTable({{"fork", absl::StrCat(s->resumes_fork)},
              {"adopt", absl::StrCat(s->resumes_adopt)},
              {"miss", absl::StrCat(s->resumes_miss)}},
             "  ");
  std::cout << "sessions\n";
  PrintTable({{"attached", absl::StrCat(s->sessions)},
              {"requests", absl::StrCat(s->requests)},
              {"lease expiries", absl::StrCat(s->lease_expiries)},
              {"evicted", absl::StrCat(s->sessions_evicted)}},
             "  ");
  return absl::OkStatus();
}

absl::Status SessionsCommand(Client& client, const CommandLine& line) {
  absl::StatusOr<std::vector<SessionSummary>> sessions = client.ListSessions();
  if (!sessions.ok()) return sessions.status();
  if (line.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const SessionSummary& s : *sessions) {
      list.push_back({{"session_id", s.session_id},
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
      {"SESSION", "CLIENT", "REQUESTS", "SLOTS", "PINS", "ATTACHED", "IDLE",
       "LEASE LEFT"}};
  for (const SessionSummary& s : *sessions) {
    rows.push_back({s.session_id, s.client_name.empty() ? "-" : s.client_name,
                    absl::StrCat(s.requests), absl::StrCat(s.slots),
                    absl::StrCat(s.pins), HumanDuration(s.attached),
                    HumanDuration(s.idle), HumanDuration(s.lease_remaining)});
  }
  PrintTable(rows, "", /*has_header=*/true);
  return absl::OkStatus();
}

absl::Status ResizeCommand(Client& client, const CommandLine& line) {
  int64_t target;
  if (!absl::SimpleAtoi(line.args[1], &target)) {
    return absl::InvalidArgumentError(
        absl::StrCat("resize: not a slot count: ", line.args[1]));
  }
  absl::StatusOr<ResizeResult> result = client.Resize(target, line.deadline);
  if (!result.ok()) return result.status();
  if (line.json) {
    std::cout << nlohmann::json{{"num_slots", result->num_slots},
                                {"relocated", result->relocated},
                                {"evicted", result->evicted}}
                     .dump(2)
              << "\n";
    return absl::OkStatus();
  }
  PrintTable({{"slots", absl::StrCat(result->num_slots)},
              {"relocated", absl::StrCat(result->relocated)},
              {"evicted", absl::StrCat(result->evicted)}});
  return absl::OkStatus();
}

absl::Status EvictCommand(Client& client, const CommandLine& line) {
  absl::StatusOr<int32_t> released = client.EvictSession(line.args[1]);
  if (!released.ok()) return released.status();
  if (line.json) {
    std::cout << nlohmann::json{{"session_id", line.args[1]},
                                {"requests_released", *released}}
                     .dump(2)
              << "\n";
    return absl::OkStatus();
  }
  std::cout << "evicted " << line.args[1] << ": " << *released
            << " requests released\n";
  return absl::OkStatus();
}

struct Command {
  absl::string_view name;
  size_t operands;
  absl::Status (*run)(Client&, const CommandLine&);
};

constexpr Command kCommands[] = {
    {"status", 0, &StatusCommand},     {"stats", 0, &StatsCommand},
    {"sessions", 0, &SessionsCommand}, {"resize", 1, &ResizeCommand},
    {"evict", 1, &EvictCommand},
};

int Main(int argc, char** argv) {
  absl::StatusOr<CommandLine> line = ParseCommandLine(argc, argv);
  if (absl::IsCancelled(line.status())) {  // --help
    PrintUsage(std::cout);
    return kExitOk;
  }
  if (!line.ok()) {
    std::cerr << "statecachectl: " << line.status().message() << "\n";
    PrintUsage(std::cerr);
    return kExitUsage;
  }
  const Command* command = nullptr;
  for (const Command& candidate : kCommands) {
    if (candidate.name == line->args[0]) command = &candidate;
  }
  if (command == nullptr) {
    std::cerr << "statecachectl: unknown command " << line->args[0] << "\n";
    PrintUsage(std::cerr);
    return kExitUsage;
  }
  if (line->args.size() != command->operands + 1) {
    std::cerr << "statecachectl: " << command->name << " takes "
              << command->operands << " operand(s)\n";
    PrintUsage(std::cerr);
    return kExitUsage;
  }
  if (command->name == "resize") {
    int64_t target;
    if (!absl::SimpleAtoi(line->args[1], &target)) {
      std::cerr << "statecachectl: resize: not a slot count: " << line->args[1]
                << "\n";
      return kExitUsage;
    }
  }

  ClientOptions options;
  options.rpc_timeout = line->timeout;
  options.connect_timeout = line->timeout;
  options.keepalive = false;
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Connect(line->address, options);
  absl::Status status =
      client.ok() ? command->run(**client, *line) : client.status();
  if (!status.ok()) {
    std::cerr << "statecachectl: " << command->name << ": "
              << absl::StatusCodeToString(status.code()) << ": "
              << status.message() << "\n";
    return kExitRpcError;
  }
  return kExitOk;
}

}  // namespace
}  // namespace statecache

int main(int argc, char** argv) { return statecache::Main(argc, argv); }
