#include "kernels/copy_table.h"

#include <algorithm>

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

absl::Status ValidateCopyTable(absl::Span<const CopyDescriptor> table,
                               uint64_t src_region_bytes,
                               uint64_t dst_region_bytes, bool same_region) {
  // (begin, end, descriptor index, is destination)
  struct Range {
    uint64_t begin, end;
    size_t index;
    bool dst;
  };
  std::vector<Range> ranges;
  ranges.reserve(table.size() * 2);
  for (size_t i = 0; i < table.size(); ++i) {
    const CopyDescriptor& d = table[i];
    if (d.bytes == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("descriptor ", i, ": zero bytes"));
    }
    if (d.src_offset > src_region_bytes ||
        d.bytes > src_region_bytes - d.src_offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          "descriptor ", i, ": source [", d.src_offset, ", +", d.bytes,
          ") outside the source region of ", src_region_bytes, " bytes"));
    }
    if (d.dst_offset > dst_region_bytes ||
        d.bytes > dst_region_bytes - d.dst_offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          "descriptor ", i, ": destination [", d.dst_offset, ", +", d.bytes,
          ") outside the destination region of ", dst_region_bytes, " bytes"));
    }
    ranges.push_back({d.dst_offset, d.dst_offset + d.bytes, i, true});
    if (same_region) {
      ranges.push_back({d.src_offset, d.src_offset + d.bytes, i, false});
    }
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  // Sweep: a range overlapping an earlier one that is still open is an
  // error when either of the two is a destination. Track the furthest-
  // reaching open destination and open source separately.
  const Range* open_dst = nullptr;
  const Range* open_src = nullptr;
  for (const Range& r : ranges) {
    const Range* clash = nullptr;
    if (open_dst != nullptr && open_dst->end > r.begin) clash = open_dst;
    if (clash == nullptr && r.dst && open_src != nullptr &&
        open_src->end > r.begin) {
      clash = open_src;
    }
    if (clash != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "descriptor ", r.index, " ", r.dst ? "destination" : "source",
          " overlaps descriptor ", clash->index, " ",
          clash->dst ? "destination" : "source"));
    }
    const Range*& open = r.dst ? open_dst : open_src;
    if (open == nullptr || r.end > open->end) open = &r;
  }
  return absl::OkStatus();
}

std::vector<CopyDescriptor> SplitCopyTable(
    absl::Span<const CopyDescriptor> table, uint64_t max_bytes) {
  std::vector<CopyDescriptor> out;
  out.reserve(table.size());
  for (const CopyDescriptor& d : table) {
    for (uint64_t done = 0; done < d.bytes; done += max_bytes) {
      out.push_back({d.src_offset + done, d.dst_offset + done,
                     std::min(max_bytes, d.bytes - done)});
    }
  }
  return out;
}

}  // namespace statecache
