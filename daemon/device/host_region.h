// HostRegion: a client's mapping of a host-backend state region (what a model
// runner, the C++ client and the tests use to read and write slots).
//
// Open maps the shared-memory object an export names, read-write, and gives
// pointers to the piece of any (tensor, layer, slot) from the export's
// placements, the same arithmetic a PyTorch runner does with as_strided.
// After the daemon resizes the region, Remap with the new export.
//
// Thread-safety: thread-compatible. The pointers are plain memory: the
// client coordinates its writes with the daemon's copies through the
// protocol (the daemon copies only between forwards that touch the slots).
#ifndef STATECACHE_DAEMON_DEVICE_HOST_REGION_H_
#define STATECACHE_DAEMON_DEVICE_HOST_REGION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "vocabulary/region_export.h"

namespace statecache {

class HostRegion {
 public:
  // Maps the region `region` describes.
  // Errors: INVALID_ARGUMENT unless region.backend == "host" and the
  // placements match the layout; NOT_FOUND if the object is gone (daemon
  // exited); PERMISSION_DENIED by its mode; FAILED_PRECONDITION if the
  // object is smaller than region_bytes; INTERNAL for other failures.
  static absl::StatusOr<HostRegion> Open(const RegionExport& region);

  HostRegion(HostRegion&& other) noexcept;
  HostRegion& operator=(HostRegion&& other) noexcept;
  ~HostRegion();  // unmaps and closes

  // Follows a resize: maps the region `region` describes now. Pointers
  // taken before are invalid afterwards.
  // Errors: as Open, and INVALID_ARGUMENT if region.handle is not the handle
  // this region was opened with (a restarted daemon: Open anew). On error
  // the old mapping stays.
  absl::Status Remap(const RegionExport& region);

  const RegionExport& region() const { return region_; }
  char* base() const { return base_; }
  uint64_t size() const { return region_.region_bytes; }

  // First byte of slot `slot`'s piece of (tensor, layer).
  // REQUIRES: 0 <= tensor < layout.num_tensors(), 0 <= layer <
  // layout.num_layers(), 0 <= slot < region().num_slots.
  char* Piece(int tensor, int64_t layer, int64_t slot) const {
    const TensorPlacement& p = placement(tensor, layer);
    return base_ + p.offset + static_cast<uint64_t>(slot) * p.slot_stride;
  }
  // The piece's bytes, padding excluded.
  absl::Span<uint8_t> PieceBytes(int tensor, int64_t layer,
                                 int64_t slot) const {
    return {reinterpret_cast<uint8_t*>(Piece(tensor, layer, slot)),
            placement(tensor, layer).bytes};
  }
  // The piece as elements of T (e.g. uint16_t for bf16).
  // REQUIRES: as Piece, and sizeof(T) == DTypeSize of the tensor's dtype.
  template <typename T>
  absl::Span<T> Typed(int tensor, int64_t layer, int64_t slot) const {
    return {reinterpret_cast<T*>(Piece(tensor, layer, slot)),
            placement(tensor, layer).bytes / sizeof(T)};
  }
  const TensorPlacement& placement(int tensor, int64_t layer) const {
    return region_
        .placements[static_cast<size_t>(layer) * region_.layout.num_tensors() +
                    tensor];
  }

 private:
  HostRegion() = default;
  void Unmap();

  RegionExport region_;
  int fd_ = -1;
  char* base_ = nullptr;
  uint64_t mapped_bytes_ = 0;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_DEVICE_HOST_REGION_H_
