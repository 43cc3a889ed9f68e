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
//   --deadline); 4 the daemon is unreachable (no connection at
//   --address).#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "client/ctl/command_line.h"
#include "client/ctl/commands.h"
#include "client/statecache_client.h"

namespace statecache::ctl {
namespace {

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
}  // namespace statecache::ctl

int main(int argc, char** argv) {
  const int code = statecache::ctl::Main(argc, argv);
  // Out without running static destructors: after a refused TLS handshake
  // gRPC's threads may still be tearing the attempt down, and destroying
  // its globals under them crashed the exit now and then (SIGSEGV after
  // the message was printed). Nothing is left to flush but the streams.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}
