// Minimal event logging for the daemon and its tools.
//
// Abseil 20220623 has no absl/log, so this is the project's logger: one line
// per event on stderr, with a UTC timestamp, a level letter and the program
// name, e.g.
//
//   2026-11-29T20:00:00.123Z I statecached: listening on unix:/run/... epoch=7
//
// Levels: E (error), W (warning), I (info: events an operator wants, always
// on), D (debug: one line per RPC, only at verbosity >= 1).
//
// Usage: LOG_INFO("session %s attached", id); arguments are absl::StrFormat
// arguments, checked at compile time.
//
// Thread safety: thread-safe. Each line is written with a single write(2),
// so lines from concurrent threads do not interleave. Never call from a
// signal handler (formatting allocates).
#ifndef STATECACHE_DAEMON_SERVICE_LOG_H_
#define STATECACHE_DAEMON_SERVICE_LOG_H_

#include <unistd.h>

#include <atomic>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace statecache::log {

namespace internal {
inline std::atomic<int> verbosity{0};
// Set once at startup, before any thread logs.
inline std::string program_name = "statecached";
}  // namespace internal

// REQUIRES: called before other threads start logging.
inline void SetProgramName(std::string name) {
  internal::program_name = std::move(name);
}

// 0 = info events only; 1 = also debug (per RPC).
inline void SetVerbosity(int verbosity) {
  internal::verbosity.store(verbosity, std::memory_order_relaxed);
}
inline int Verbosity() {
  return internal::verbosity.load(std::memory_order_relaxed);
}

// Writes one complete line. `level` is one of 'E', 'W', 'I', 'D'.
inline void Write(char level, std::string_view message) {
  std::string line = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(),
                                      absl::UTCTimeZone());
  absl::StrAppendFormat(&line, " %c %s: %s\n", level, internal::program_name,
                        message);
  // One write per line keeps concurrent lines whole. A short or failed
  // write (stderr closed) loses the line: logging never retries or fails.
  ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
  (void)written;
}

}  // namespace statecache::log

#define LOG_ERROR(...) \
  ::statecache::log::Write('E', ::absl::StrFormat(__VA_ARGS__))
#define LOG_WARNING(...) \
  ::statecache::log::Write('W', ::absl::StrFormat(__VA_ARGS__))
#define LOG_INFO(...) \
  ::statecache::log::Write('I', ::absl::StrFormat(__VA_ARGS__))
// Formats nothing unless debug logging is on.
#define LOG_DEBUG(...)                                               \
  do {                                                               \
    if (::statecache::log::Verbosity() >= 1) {                       \
      ::statecache::log::Write('D', ::absl::StrFormat(__VA_ARGS__)); \
    }                                                                \
  } while (0)

#endif  // STATECACHE_DAEMON_SERVICE_LOG_H_
