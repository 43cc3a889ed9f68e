// Where statecached listens unless told otherwise, shared by the daemon
// (--listen) and every client (statecachectl --address, Client::Connect
// callers), so both sides agree without configuration.
//
//   root:       unix:/run/statecache/statecached.sock
//   otherwise:  unix:$XDG_RUNTIME_DIR/statecache/statecached.sock when
//               XDG_RUNTIME_DIR is set (an absolute path),
//               else unix:/tmp/statecache-$UID/statecached.sock
//
// Thread safety: thread-safe (reads the environment).
#ifndef STATECACHE_VOCABULARY_DEFAULT_ADDRESS_H_
#define STATECACHE_VOCABULARY_DEFAULT_ADDRESS_H_

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace statecache {

inline std::string DefaultAddress() {
  const uid_t uid = ::geteuid();
  if (uid == 0) return "unix:/run/statecache/statecached.sock";
  const char* runtime_dir = std::getenv("XDG_RUNTIME_DIR");
  if (runtime_dir != nullptr && runtime_dir[0] == '/') {
    return std::string("unix:") + runtime_dir + "/statecache/statecached.sock";
  }
  return "unix:/tmp/statecache-" + std::to_string(uid) + "/statecached.sock";
}

}  // namespace statecache

#endif  // STATECACHE_VOCABULARY_DEFAULT_ADDRESS_H_
