#include "daemon/device/copy_plan.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace statecache {
namespace {

constexpr uint8_t kSource = 1;
constexpr uint8_t kDestination = 2;

std::string PairName(size_t index, const SlotPair& pair) {
  return absl::StrCat("pairs[", index, "] (", pair.first, " -> ", pair.second,
                      ")");
}

std::string ImageName(size_t index, const SlotImage& image) {
  return absl::StrCat("images[", index, "] (slot ", image.slot, " at offset ",
                      image.offset, ")");
}

// Appends a descriptor, extending the last one when both ranges continue it.
void Emit(uint64_t src, uint64_t dst, uint64_t bytes, CopyTable& table) {
  table.total_bytes += bytes;
  if (!table.descriptors.empty()) {
    CopyDescriptor& last = table.descriptors.back();
    if (last.src_offset + last.bytes == src &&
        last.dst_offset + last.bytes == dst) {
      last.bytes += bytes;
      return;
    }
  }
  table.descriptors.push_back({src, dst, bytes});
}

}  // namespace

absl::StatusOr<CopyTable> BuildCopyTable(const StateLayout& layout,
                                         int64_t capacity, int64_t num_slots,
                                         absl::Span<const SlotPair> pairs) {
  absl::flat_hash_map<int64_t, uint8_t> roles;
  roles.reserve(pairs.size() * 2);
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto [src, dst] = pairs[i];
    if (src < 0 || src >= num_slots || dst < 0 || dst >= num_slots) {
      return absl::InvalidArgumentError(absl::StrCat(
          PairName(i, pairs[i]), ": slot out of range [0, ", num_slots, ")"));
    }
    if (src == dst) {
      return absl::InvalidArgumentError(
          absl::StrCat(PairName(i, pairs[i]), ": source is the destination"));
    }
    uint8_t& src_role = roles[src];
    if (src_role & kDestination) {
      return absl::InvalidArgumentError(absl::StrCat(
          PairName(i, pairs[i]), ": slot ", src,
          " is also a destination in this batch (order-dependent)"));
    }
    src_role |= kSource;
    uint8_t& dst_role = roles[dst];
    if (dst_role & kDestination) {
      return absl::InvalidArgumentError(
          absl::StrCat(PairName(i, pairs[i]), ": slot ", dst,
                       " is the destination of two pairs"));
    }
    if (dst_role & kSource) {
      return absl::InvalidArgumentError(
          absl::StrCat(PairName(i, pairs[i]), ": slot ", dst,
                       " is also a source in this batch (order-dependent)"));
    }
    dst_role |= kDestination;
  }

  // Sorted by source, runs of consecutive sources onto consecutive
  // destinations (a relocated block, a fan-in of neighbours) coalesce.
  std::vector<SlotPair> sorted(pairs.begin(), pairs.end());
  std::sort(sorted.begin(), sorted.end());

  CopyTable table;
  if (layout.arrangement() == Arrangement::kSlotMajor) {
    const uint64_t slot_bytes = layout.bytes_per_slot();
    table.descriptors.reserve(sorted.size());
    for (const auto& [src, dst] : sorted) {
      Emit(static_cast<uint64_t>(src) * slot_bytes,
           static_cast<uint64_t>(dst) * slot_bytes, slot_bytes, table);
    }
    return table;
  }
  table.descriptors.reserve(sorted.size() * layout.num_tensors() *
                            layout.num_layers());
  for (int64_t layer = 0; layer < layout.num_layers(); ++layer) {
    for (int tensor = 0; tensor < layout.num_tensors(); ++tensor) {
      const uint64_t piece = layout.padded_piece_bytes(tensor);
      for (const auto& [src, dst] : sorted) {
        Emit(layout.PieceOffset(tensor, layer, src, capacity),
             layout.PieceOffset(tensor, layer, dst, capacity), piece, table);
      }
    }
  }
  return table;
}

absl::StatusOr<CopyTable> BuildImageCopyTable(
    const StateLayout& layout, int64_t capacity, int64_t num_slots,
    uint64_t staging_bytes, absl::Span<const SlotImage> images,
    bool to_region) {
  const uint64_t slot_bytes = layout.bytes_per_slot();
  for (size_t i = 0; i < images.size(); ++i) {
    const SlotImage& image = images[i];
    if (image.slot < 0 || image.slot >= num_slots) {
      return absl::InvalidArgumentError(absl::StrCat(
          ImageName(i, image), ": slot out of range [0, ", num_slots, ")"));
    }
    // Written so that offset + slot_bytes cannot wrap.
    if (image.offset > staging_bytes ||
        staging_bytes - image.offset < slot_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(ImageName(i, image), ": the image's ", slot_bytes,
                       " bytes pass the end of the staging memory (",
                       staging_bytes, " bytes)"));
    }
  }
  if (to_region) {
    absl::flat_hash_map<int64_t, size_t> writer;
    writer.reserve(images.size());
    for (size_t i = 0; i < images.size(); ++i) {
      const auto [it, inserted] = writer.try_emplace(images[i].slot, i);
      if (!inserted) {
        return absl::InvalidArgumentError(
            absl::StrCat(ImageName(i, images[i]), ": slot ", images[i].slot,
                         " is also written by images[", it->second, "]"));
      }
    }
  }
  // Sorted by offset, an image overlaps another exactly when it overlaps its
  // successor. Ties sort by index: a batch always names the same pair.
  std::vector<size_t> by_offset(images.size());
  std::iota(by_offset.begin(), by_offset.end(), size_t{0});
  std::sort(by_offset.begin(), by_offset.end(), [&](size_t a, size_t b) {
    return std::tie(images[a].offset, a) < std::tie(images[b].offset, b);
  });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const size_t prev = by_offset[k - 1];
    const size_t next = by_offset[k];
    if (images[next].offset - images[prev].offset < slot_bytes) {
      const size_t named = std::max(prev, next);
      const size_t other = std::min(prev, next);
      return absl::InvalidArgumentError(
          absl::StrCat(ImageName(named, images[named]), ": overlaps ",
                       ImageName(other, images[other])));
    }
  }

  // Sorted by offset, runs of consecutive slots into consecutive images (a
  // block of checkpoints moved out together) coalesce: no other image can
  // sit between two members of such a run, as another slot (a fan-out read)
  // could in slot order. Piece by piece, so one loop serves both
  // arrangements: a slot-major slot's pieces are adjacent on both sides and
  // collapse into one descriptor.
  CopyTable table;
  table.descriptors.reserve(layout.arrangement() == Arrangement::kSlotMajor
                                ? images.size()
                                : images.size() * layout.num_tensors() *
                                      layout.num_layers());
  for (const size_t i : by_offset) {
    const SlotImage& image = images[i];
    for (int64_t layer = 0; layer < layout.num_layers(); ++layer) {
      for (int tensor = 0; tensor < layout.num_tensors(); ++tensor) {
        const uint64_t region =
            layout.PieceOffset(tensor, layer, image.slot, capacity);
        const uint64_t staging =
            image.offset + static_cast<uint64_t>(layer) * layout.layer_bytes() +
            layout.tensor_offset_in_layer(tensor);
        const uint64_t piece = layout.padded_piece_bytes(tensor);
        if (to_region) {
          Emit(staging, region, piece, table);
        } else {
          Emit(region, staging, piece, table);
        }
      }
    }
  }
  return table;
}

}  // namespace statecache
