// RetainedRegion: a host region its daemon left behind for a warm restart
// (HostDeviceOptions::retain), opened by the next daemon to read the
// checkpoints out of it, then removed.
//
// The handle comes from the state directory, which is not trusted: Open
// accepts only a retained name of the daemon's own prefix, whose owner lock
// is free (no live daemon holds it), whose maker (the owner its name
// records) is dead, which the daemon's user owns and others cannot write,
// and which is at least as long as the region said; every read is checked
// against the mapping's bounds. A region refused is left as it is.
//
// Thread-safety: thread-compatible.
#ifndef STATECACHE_DAEMON_DEVICE_RETAINED_REGION_H_
#define STATECACHE_DAEMON_DEVICE_RETAINED_REGION_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "vocabulary/layout.h"

namespace statecache {

class RetainedRegion {
 public:
  // Maps `handle` read-only and takes its owner lock.
  // Errors: INVALID_ARGUMENT not a retained name of `prefix`; NOT_FOUND the
  //   object is gone (a reboot, an operator); FAILED_PRECONDITION a live
  //   daemon holds it, its maker still runs, or it is shorter than
  //   `region_bytes`; PERMISSION_DENIED another user's, or writable by
  //   others; INTERNAL for other failures.
  static absl::StatusOr<RetainedRegion> Open(std::string_view handle,
                                             std::string_view prefix,
                                             uint64_t region_bytes);

  RetainedRegion(RetainedRegion&& other) noexcept;
  RetainedRegion& operator=(RetainedRegion&& other) noexcept;
  ~RetainedRegion();  // unmaps and closes (the object stays unless Removed)

  // Copies the image (SlotImage's layout) of each of `slots` of the region,
  // laid out by `layout` for `capacity` slots, into `out`, image k at
  // k * layout.bytes_per_slot().
  // REQUIRES: out.size() >= slots.size() * layout.bytes_per_slot().
  // Errors: INVALID_ARGUMENT a layer-major capacity the mapping cannot hold
  //   (below 1, or more whole slots than its bytes), a slot outside
  //   [0, capacity) or past the mapping's whole slots, or a piece outside
  //   the mapping (nothing is read then).
  absl::Status ReadImages(const StateLayout& layout, int64_t capacity,
                          absl::Span<const int64_t> slots,
                          absl::Span<char> out) const;

  // Where the image of `slot` lies in a slot-major region (one slot is one
  // range, laid out as SlotImage says): read in place, no copy.
  // Errors: FAILED_PRECONDITION a layer-major layout (use ReadImages);
  //   INVALID_ARGUMENT a negative slot or one outside the mapping.
  absl::StatusOr<const char*> ImageInPlace(const StateLayout& layout,
                                           int64_t slot) const;

  // Unlinks the object; the mapping stays valid until destroyed.
  absl::Status Remove();

  const std::string& handle() const { return handle_; }

 private:
  RetainedRegion() = default;

  std::string handle_;
  int fd_ = -1;
  const char* base_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_DEVICE_RETAINED_REGION_H_
