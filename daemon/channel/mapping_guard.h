// MappingGuard: keeps a client that truncates a shared-memory object the
// daemon has mapped from crashing the daemon.
//
// A step channel's object is writable by its client, and a file a process
// can write it can also ftruncate; the daemon's next access to the lost
// pages would then raise SIGBUS. As Wayland compositors do for their
// clients' buffers, a SIGBUS handler looks the faulting address up among the
// registered mappings and, when it is one of them, maps anonymous zero pages
// over the whole mapping (MAP_FIXED) and marks it faulted; the access is
// retried and reads zeros, and the mapping's owner sees Faulted() and ends
// the channel. A SIGBUS anywhere else is handled as it would have been
// without the guard (the previous handler, or the default: the process
// dies).
//
// Thread-safety: thread-safe and async-signal-safe where it matters (the
// handler reads a fixed table of atomics).
#ifndef STATECACHE_DAEMON_CHANNEL_MAPPING_GUARD_H_
#define STATECACHE_DAEMON_CHANNEL_MAPPING_GUARD_H_

#include <cstddef>

#include "absl/status/status.h"

namespace statecache {

class MappingGuard {
 public:
  // Mappings guarded at once.
  static constexpr int kCapacity = 4096;

  // Installs the SIGBUS handler (once per process; later calls do nothing).
  // Errors: INTERNAL when sigaction fails.
  static absl::Status Install();

  // Guards the mapping [base, base + bytes) until Unregister. Returns its
  // entry, or -1 when kCapacity mappings are guarded already.
  // REQUIRES: Install() succeeded; `base` page-aligned.
  static int Register(void* base, size_t bytes);
  // Stops guarding entry `entry` (before the mapping is unmapped).
  static void Unregister(int entry);
  // Whether a SIGBUS hit entry `entry`'s mapping (now zero pages).
  static bool Faulted(int entry);
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CHANNEL_MAPPING_GUARD_H_
