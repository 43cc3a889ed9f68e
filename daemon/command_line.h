// Judging the daemon's command line before Abseil parses it, so that a bad
// one is a configuration error (exit 2) like every other, not Abseil's exit 1.
//
// Thread-compatible: reads the flag registry (and sets the flags it judges,
// which ParseCommandLine sets again).
#ifndef STATECACHE_DAEMON_COMMAND_LINE_H_
#define STATECACHE_DAEMON_COMMAND_LINE_H_

#include <optional>
#include <string>

namespace statecache {

// What is wrong with the command line's flags, as one line naming the flag,
// or nullopt: a flag this program does not define, or a value its flag
// cannot parse. Reads the command line as absl::ParseCommandLine does
// ("--name=value", "--name value", "--noname" for a bool, one or two
// dashes, "--" ending the flags) and knows Abseil's own usage flags.
std::optional<std::string> BadFlag(int argc, char** argv);

}  // namespace statecache

#endif  // STATECACHE_DAEMON_COMMAND_LINE_H_
