// StateLayout: what one slot of the state tensor holds and where every piece
// of every slot lies in the region.
//
// A layout is a list of state tensors (name, per-slot shape, dtype), each
// repeated over `num_layers` state layers (the model's recurrent layers only:
// attention layers keep KV, not state). One (tensor, layer) of one slot is a
// *piece*. Every piece is padded to kLayoutAlignment (16) bytes, so every
// piece starts 16-byte aligned in a 16-byte aligned region and every copy the
// daemon runs is 16-byte vectorisable end to end. Padding bytes belong to the
// slot: copies move them too, and nothing reads them.
//
// Two arrangements of N slots ("capacity", see below) in one region:
//
//   slot-major (default): [slot][layer][tensor]. One slot is one contiguous
//     range of bytes_per_slot() bytes at slot * bytes_per_slot(): a slot copy
//     is one range, and shrinking frees a contiguous tail. Offsets do not
//     depend on the capacity, so the region can grow and shrink in place.
//
//   layer-major: [layer][tensor][slot], as ATOM and vLLM allocate their state
//     (one [slot, *shape] tensor per layer and state kind). The block of
//     (layer, tensor) holds `capacity` pieces back to back, so every block's
//     offset depends on the capacity: growing the capacity would move every
//     block. A layer-major region is therefore laid out once for a fixed
//     capacity (the daemon's max slots) and never re-laid; the slot count
//     moves within it. Shrinking frees the tail of each block (page-granular
//     holes, on the host backend), growing refills it; nothing moves.
//
// Both arrangements use the same bytes: RegionBytes(N) = N * bytes_per_slot().
//
// A model runner builds, for each (tensor, layer), the view
//   base + offset, sizes [capacity, *shape], byte strides [slot_stride,
//   *strides]
// from the TensorPlacement below; the byte strides are multiples of the
// element size (pieces are 16-byte padded), so dividing them by
// DTypeSize(dtype) gives element strides (torch.as_strided).
//
// Fingerprint: FNV-1a 64 over CanonicalString(), which is
//   "statecache-layout/v1;align=16;arrangement=<slot_major|layer_major>;"
//   "layers=<num_layers>;" then for each tensor in order
//   "tensor=<name>:<dtype canonical name>:<d0>x<d1>x...;"
// e.g. "statecache-layout/v1;align=16;arrangement=slot_major;layers=36;
//       tensor=conv:bf16:3x8192;tensor=ssm:bf16:32x128x128;".
// The layout's display name is not part of it (two layouts with the same
// memory arrangement are interchangeable; the model id is checked on its
// own), nor is the capacity (it travels with the region).
//
// Thread-safety: immutable after Create; safe to share across threads.
#ifndef STATECACHE_VOCABULARY_LAYOUT_H_
#define STATECACHE_VOCABULARY_LAYOUT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "vocabulary/dtype.h"

namespace statecache {

// Every piece's offset and size is a multiple of this.
inline constexpr uint64_t kLayoutAlignment = 16;

// Limits Create enforces, chosen so that RegionBytes of any capacity up to
// kMaxLayoutSlots fits in 63 bits.
inline constexpr int kMaxLayoutTensors = 64;
inline constexpr int64_t kMaxLayoutLayers = 4096;
inline constexpr int kMaxTensorRank = 8;
inline constexpr uint64_t kMaxBytesPerSlot = uint64_t{1} << 32;  // 4 GiB
inline constexpr int64_t kMaxLayoutSlots = int64_t{1} << 30;

enum class Arrangement : uint8_t { kSlotMajor, kLayerMajor };

// "slot_major" / "layer_major".
std::string_view ArrangementName(Arrangement arrangement);
// Errors: INVALID_ARGUMENT naming the accepted names.
absl::StatusOr<Arrangement> ParseArrangement(std::string_view name);

// One state tensor, per slot and per layer.
struct StateTensorSpec {
  std::string name;            // [A-Za-z0-9_.-]{1,64}, unique in a layout
  std::vector<int64_t> shape;  // rank 1..8, every dimension >= 1
  DType dtype = DType::kBF16;
  friend bool operator==(const StateTensorSpec&,
                         const StateTensorSpec&) = default;
};

// Where one (tensor, layer) lies for a given capacity. All values in bytes.
// Slot s's piece is [offset + s * slot_stride, ... + bytes).
struct TensorPlacement {
  int tensor = 0;             // index into StateLayout::tensors()
  int64_t layer = 0;          // 0 .. num_layers-1 (state layers only)
  uint64_t offset = 0;        // slot 0's piece, from the region base
  uint64_t slot_stride = 0;   // from slot s's piece to slot s+1's
  uint64_t bytes = 0;         // one piece, unpadded: prod(shape) * dtype size
  uint64_t padded_bytes = 0;  // bytes rounded up to kLayoutAlignment
  std::vector<uint64_t> strides;  // per shape dimension, row-major
  friend bool operator==(const TensorPlacement&,
                         const TensorPlacement&) = default;
};

class StateLayout {
 public:
  // An empty layout (no tensors, zero bytes): a placeholder for structs that
  // carry a layout, never returned by Create.
  StateLayout() = default;

  // Validates and computes a layout. `name` is for display only (not part
  // of the fingerprint); may be empty.
  // Errors: INVALID_ARGUMENT naming the bad field: no tensors or more than
  // kMaxLayoutTensors, a bad or duplicate tensor name, rank outside 1..8, a
  // dimension < 1, num_layers outside 1..kMaxLayoutLayers, bytes per slot
  // above kMaxBytesPerSlot.
  static absl::StatusOr<StateLayout> Create(
      std::string name, std::vector<StateTensorSpec> tensors,
      int64_t num_layers, Arrangement arrangement = Arrangement::kSlotMajor);

  // The same tensors in another arrangement (cannot fail).
  StateLayout WithArrangement(Arrangement arrangement) const;

  const std::string& name() const { return name_; }
  absl::Span<const StateTensorSpec> tensors() const { return tensors_; }
  int num_tensors() const { return static_cast<int>(tensors_.size()); }
  int64_t num_layers() const { return num_layers_; }
  Arrangement arrangement() const { return arrangement_; }
  // Index of the tensor named `name`, or -1.
  int FindTensor(std::string_view name) const;

  // REQUIRES (these three): 0 <= tensor < num_tensors().
  uint64_t piece_bytes(int tensor) const { return piece_bytes_[tensor]; }
  uint64_t padded_piece_bytes(int tensor) const {
    return padded_piece_bytes_[tensor];
  }
  // Byte offset of tensor `tensor` inside one layer of one slot (slot-major).
  uint64_t tensor_offset_in_layer(int tensor) const {
    return tensor_offset_in_layer_[tensor];
  }
  // One layer of one slot: the sum of the padded pieces.
  uint64_t layer_bytes() const { return layer_bytes_; }
  // One slot, every layer: num_layers() * layer_bytes(). A multiple of 16.
  uint64_t bytes_per_slot() const { return layer_bytes_ * num_layers_; }

  // Bytes of a region laid out for `capacity` slots.
  // REQUIRES: 0 <= capacity <= kMaxLayoutSlots.
  uint64_t RegionBytes(int64_t capacity) const {
    return static_cast<uint64_t>(capacity) * bytes_per_slot();
  }

  // Where (tensor, layer) lies in a region laid out for `capacity` slots
  // (slot-major ignores the capacity).
  // REQUIRES: 0 <= tensor < num_tensors(), 0 <= layer < num_layers(),
  // 0 <= capacity <= kMaxLayoutSlots.
  TensorPlacement Place(int tensor, int64_t layer, int64_t capacity) const;
  // Every placement, [layer][tensor] order (index layer * num_tensors() +
  // tensor). Same REQUIRES on capacity.
  std::vector<TensorPlacement> Placements(int64_t capacity) const;

  // Byte offset of one piece: what Place gives, without building it.
  // REQUIRES: as Place, and 0 <= slot < capacity.
  uint64_t PieceOffset(int tensor, int64_t layer, int64_t slot,
                       int64_t capacity) const;

  // See the file comment for the exact format.
  std::string CanonicalString() const;
  // FNV-1a 64 of CanonicalString(), computed once.
  uint64_t fingerprint() const { return fingerprint_; }
  // fingerprint() as 16 lowercase hex digits.
  std::string FingerprintHex() const;

  // Human-readable, one line per tensor, with the sizes.
  std::string DebugString() const;

  friend bool operator==(const StateLayout& a, const StateLayout& b) {
    return a.name_ == b.name_ && a.tensors_ == b.tensors_ &&
           a.num_layers_ == b.num_layers_ && a.arrangement_ == b.arrangement_;
  }

 private:
  void Compute();  // fills the derived members from the four above

  std::string name_;
  std::vector<StateTensorSpec> tensors_;
  int64_t num_layers_ = 0;
  Arrangement arrangement_ = Arrangement::kSlotMajor;

  std::vector<uint64_t> piece_bytes_;
  std::vector<uint64_t> padded_piece_bytes_;
  std::vector<uint64_t> tensor_offset_in_layer_;
  uint64_t layer_bytes_ = 0;
  uint64_t fingerprint_ = 0;
};

// FNV-1a 64 of `bytes` (offset basis 0xcbf29ce484222325, prime
// 0x100000001b3): the layout fingerprint's hash, exposed so clients in other
// languages can check their reimplementation against ours.
uint64_t Fnv1a64(std::string_view bytes);

}  // namespace statecache

#endif  // STATECACHE_VOCABULARY_LAYOUT_H_
