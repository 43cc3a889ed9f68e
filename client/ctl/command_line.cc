#include "client/ctl/command_line.h"

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
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace statecache::ctl {
namespace {

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

}  // namespace

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

}  // namespace statecache::ctl
