// StreamResetWatch: finds the connections that open HTTP/2 streams and
// abandon them faster than any client has reason to (the rapid-reset
// attack, CVE-2023-44487), so the accept loop can close them.
//
// Debian's gRPC predates the upstream mitigation: a stream the client
// resets does not count against the concurrent-stream cap, and gRPC keeps
// each such call until its connection closes, so one connection can pin
// gigabytes in seconds. The daemon cannot see the frames (the connection is
// gRPC's once handed over), but gRPC's channelz counts, per connection,
// the streams started and those that ended with the server's trailers (a
// reply, an error included). The streams that did neither were reset,
// cancelled or are still open: a well-behaved client has at most its
// concurrent-stream cap open, and cancels rarely. A connection whose count
// of such streams grows by more than `max_resets_per_second` a second
// (plus the stream cap, for those open) between two looks is an abuser.
//
// Cost: each look reads the server's own counters first (one channelz
// query); only when they show that many unfinished streams server-wide are
// the connections read one by one. Nothing runs on the calls' path.
//
// Thread-compatible: the accept loop's alone.
#ifndef STATECACHE_DAEMON_STREAM_RESET_WATCH_H_
#define STATECACHE_DAEMON_STREAM_RESET_WATCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace statecache {

class StreamResetWatch {
 public:
  struct Options {
    // Abandoned streams a second one connection may reach. REQUIRES: >= 1.
    int64_t max_resets_per_second = 1000;
    // Streams a connection may have open at once (--max_streams_per
    // _connection): they are not finished yet either. REQUIRES: >= 0.
    int64_t max_open_streams = 100;
  };

  explicit StreamResetWatch(Options options) : options_(options) {}

  // Watches the connection on descriptor `fd`, which gRPC names `name` in
  // channelz ("fd:N" for one handed over as a descriptor, the peer's
  // address for one handed to the TLS acceptor).
  void Watch(int fd, std::string name);
  // Stops watching `fd` (gRPC closed it).
  void Forget(int fd);

  // Looks at every watched connection; returns the descriptors of those
  // whose unfinished streams grew faster than allowed since the last look
  // (they stay watched until Forget). The first look only takes readings.
  std::vector<int> Check(absl::Time now);

 private:
  struct Watched {
    std::string name;
    intptr_t socket_id = 0;   // its channelz socket, once found
    int64_t unfinished = -1;  // at the last look; -1 before any
  };
  // Finds the channelz sockets of connections that have none yet.
  void Resolve();
  // The server's started minus succeeded calls, or -1 if unknown.
  int64_t ServerUnfinished();

  const Options options_;
  absl::flat_hash_map<int, Watched> watched_;
  intptr_t server_id_ = 0;
  // Channelz ids below this were looked at by Resolve already.
  intptr_t next_socket_id_ = 1;
  int64_t server_unfinished_ = -1;
  absl::Time last_look_ = absl::InfinitePast();
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_STREAM_RESET_WATCH_H_
