#include "daemon/device/copy_plan.h"

#include <algorithm>
#include <string>

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

}  // namespace statecache
