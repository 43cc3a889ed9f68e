// statecachectl's commands: each one's name, operands, the flags it takes
// and what it does with a connected client.
//
// Thread-compatible.
#ifndef STATECACHE_CLIENT_CTL_COMMANDS_H_
#define STATECACHE_CLIENT_CTL_COMMANDS_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/ctl/command_line.h"
#include "client/statecache_client.h"

namespace statecache::ctl {

struct Command {
  absl::string_view name;
  size_t operands;
  absl::Status (*run)(Client&, const CommandLine&);
  // Command-specific flags it accepts (address, json, timeout: all do).
  std::vector<absl::string_view> flags;
};

// Every command, in the order the usage lists them.
const std::vector<Command>& Commands();

}  // namespace statecache::ctl

#endif  // STATECACHE_CLIENT_CTL_COMMANDS_H_
