// SavedState: what a daemon keeps in its state directory so that the next
// daemon on the same directory comes back with its checkpoints (the file
// `index`, daemon/service/state_dir.h), and its byte encoding.
//
// The record says what the checkpoints were made under (`fingerprint`: the
// identity clients attach with, the transfer, and the state layout's
// fingerprint; a daemon started with anything else must not read them),
// where each checkpoint's bytes are, its place in the LRU, its speculative
// mark and a checksum of its bytes (daemon/common/checksum.h).
//
// Where the bytes are:
//   device checkpoints  in the slots of a host region that outlived its
//                       daemon (`region`), or, for a backend whose memory
//                       dies with the process, in the images file
//                       `device_images` (image k = device[k]), written at
//                       shutdown.
//   tier entries        in the images file `tier_images` (image k =
//                       tier[k]), written at shutdown.
//
// Encoding: little-endian, length-prefixed, ending in a checksum of all the
// bytes before it, so a torn or corrupted file is recognised as such
// (DATA_LOSS), never half read. Decoding checks every count and length
// against the bytes there before it reserves anything.
//
// Thread-safe: pure functions.
#ifndef STATECACHE_DAEMON_CORE_SAVED_STATE_H_
#define STATECACHE_DAEMON_CORE_SAVED_STATE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/core/slot_memory.h"

namespace statecache {

struct SavedRegion {
  std::string handle;     // the host region's shm name; "" = none
  int64_t capacity = 0;   // slots its placements are laid out for
  int64_t num_slots = 0;  // slots in use when saved
  uint64_t region_bytes = 0;
  friend bool operator==(const SavedRegion&, const SavedRegion&) = default;
};

struct SavedState {
  std::string fingerprint;
  uint64_t epoch = 0;  // of the daemon that wrote it
  uint64_t bytes_per_slot = 0;
  // The device checkpoints' bytes: `region` when its handle is set, else
  // `device_images` (a file name in the state directory).
  SavedRegion region;
  std::string device_images;
  std::vector<SlotMemory::SavedCheckpoint> device;
  std::string tier_images;  // "" = none
  std::vector<SlotMemory::SavedCheckpoint> tier;
  friend bool operator==(const SavedState&, const SavedState&) = default;
};

std::string EncodeSavedState(const SavedState& state);

// Errors: DATA_LOSS naming what is wrong (too short, bad magic, unknown
// version, checksum mismatch, a count or length past the end, a negative
// hash or location, bytes after the end).
absl::StatusOr<SavedState> DecodeSavedState(std::string_view bytes);

// Where image `location` of `image_bytes` bytes starts in a file or region
// of `available_bytes` (image k at k * image_bytes): every location an index
// names passes through here before any byte is read, since a decoded index
// vouches for its own encoding, not for its numbers. No product is formed
// before the bound is known to hold, so a huge location can neither wrap
// into range nor alias another image.
// Errors: FAILED_PRECONDITION naming the location when it is negative or
//   its image does not lie wholly inside available_bytes, or when
//   image_bytes is 0.
absl::StatusOr<uint64_t> ImageOffset(int64_t location, uint64_t image_bytes,
                                     uint64_t available_bytes);

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CORE_SAVED_STATE_H_
