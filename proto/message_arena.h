// MessageArenaOptions: how the daemon and the client library size the
// protobuf Arena that holds one Step's request and response.
//
// Thread-safe (a pure function).
#ifndef STATECACHE_PROTO_MESSAGE_ARENA_H_
#define STATECACHE_PROTO_MESSAGE_ARENA_H_

#include <google/protobuf/arena.h>

namespace statecache {

// The first block holds a 256-operation pass's request and response, so a
// typical Step allocates once.
inline google::protobuf::ArenaOptions MessageArenaOptions() {
  google::protobuf::ArenaOptions options;
  options.start_block_size = 64 << 10;
  options.max_block_size = 256 << 10;
  return options;
}

}  // namespace statecache

#endif  // STATECACHE_PROTO_MESSAGE_ARENA_H_
