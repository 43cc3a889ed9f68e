#include "kernels/copy_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace statecache {

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
