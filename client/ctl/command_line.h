// statecachectl's command line: its flags, its usage text and exit codes.
//
// Thread-compatible (plain values and functions).
#ifndef STATECACHE_CLIENT_CTL_COMMAND_LINE_H_
#define STATECACHE_CLIENT_CTL_COMMAND_LINE_H_

#include <algorithm>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "vocabulary/default_address.h"

namespace statecache::ctl {

// Exit codes (the usage text lists them; scripts rely on them).
inline constexpr int kExitOk = 0;
inline constexpr int kExitRpcError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitTimeout = 3;
inline constexpr int kExitUnreachable = 4;

// Per-call deadline unless --timeout says otherwise.
inline constexpr absl::Duration kDefaultCallTimeout = absl::Seconds(5);

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

bool IsTlsFlag(absl::string_view name);

void PrintUsage(std::ostream& out);

// After a usage error: the error, then where the full usage is.
void UsageError(absl::string_view message);

// Parses argv. Flags may come before or after the command; "--" ends them.
// Errors: INVALID_ARGUMENT naming the bad argument; CANCELLED for --help.
absl::StatusOr<CommandLine> ParseCommandLine(int argc, char** argv);

}  // namespace statecache::ctl

#endif  // STATECACHE_CLIENT_CTL_COMMAND_LINE_H_
