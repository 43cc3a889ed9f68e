// SortBySlot: sorts records by their slot, for the pin clocks.
//
// Each pass, a pin clock (SlotPool::ReleasePins, a session's begin_pass)
// releases its pins in slot order, as the reference's sorted() does: a
// hundred or more in a big batch. A comparison sort's mispredicted branches
// made it a large share of a pass's pool time (pool_bench (b) measures it),
// so from 64 records up this is an LSD radix sort on the
// slot's bytes: one counting pass per byte the largest slot needs (two below
// 65536 slots, three below 2^24), each O(n + 256). Below 64, std::sort.
//
// Thread-compatible (pure function).
#ifndef STATECACHE_DAEMON_CORE_SLOT_SORT_H_
#define STATECACHE_DAEMON_CORE_SLOT_SORT_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace statecache {

// Sorts `records` by slot(record), ascending; `scratch` is room for the sort
// (its contents are overwritten). Records with equal slots keep no
// particular order.
// REQUIRES: slot(r) >= 0 for every record.
template <typename T, typename SlotOf>
void SortBySlot(std::vector<T>& records, std::vector<T>& scratch, SlotOf slot) {
  if (records.size() < 64) {
    std::sort(records.begin(), records.end(),
              [&](const T& a, const T& b) { return slot(a) < slot(b); });
    return;
  }
  int64_t max_slot = 0;
  for (const T& r : records) max_slot = std::max<int64_t>(max_slot, slot(r));
  scratch.resize(records.size());
  for (int shift = 0; shift == 0 || (max_slot >> shift) != 0; shift += 8) {
    size_t start[257] = {};
    for (const T& r : records) {
      ++start[((static_cast<int64_t>(slot(r)) >> shift) & 0xff) + 1];
    }
    for (int d = 0; d < 256; ++d) start[d + 1] += start[d];
    for (const T& r : records) {
      scratch[start[(static_cast<int64_t>(slot(r)) >> shift) & 0xff]++] = r;
    }
    records.swap(scratch);
  }
}

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CORE_SLOT_SORT_H_
