// Checksums of checkpoint bytes: what the state directory vouches for a
// checkpoint with, so that a restarted daemon drops, rather than serves, one
// whose bytes changed after it was published.
//
// XXH3-64 (libxxhash): a well-reviewed non-cryptographic hash fast enough to
// run over every published checkpoint on the daemon's pass. It guards
// against accidents (a torn write, a stray write into a slot, a region
// reused by something else), not against an attacker who can write the
// state memory: such a writer could forge state anyway.
//
// Thread-safe: a pure function.
#ifndef STATECACHE_DAEMON_COMMON_CHECKSUM_H_
#define STATECACHE_DAEMON_COMMON_CHECKSUM_H_

#include <cstddef>
#include <cstdint>

namespace statecache {

// The checksum of [data, data + size).
uint64_t Checksum(const void* data, size_t size);

}  // namespace statecache

#endif  // STATECACHE_DAEMON_COMMON_CHECKSUM_H_
