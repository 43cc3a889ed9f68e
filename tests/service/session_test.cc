// Session's per-slot pin bookkeeping: the clock's sort and reader removal.
#include "daemon/service/session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace statecache {
namespace {

using PinList = std::vector<std::pair<int64_t, SessionPin*>>;

// Distinct slots below `limit`, in random order, each paired with its own
// SessionPin (so the test can check the pointers travel with their slots).
PinList RandomPins(std::mt19937_64& rng, size_t n, int64_t limit,
                   std::vector<SessionPin>& storage) {
  std::vector<int64_t> slots;
  while (slots.size() < n) {
    const int64_t s = static_cast<int64_t>(rng() % limit);
    if (std::find(slots.begin(), slots.end(), s) == slots.end()) {
      slots.push_back(s);
    }
  }
  storage.assign(n, SessionPin{});
  PinList out;
  for (size_t i = 0; i < n; ++i) {
    storage[i].count = static_cast<int32_t>(slots[i] % 1000 + 1);
    out.emplace_back(slots[i], &storage[i]);
  }
  return out;
}

TEST(SortBySlotTest, MatchesAComparisonSortAtEverySizeAndRange) {
  std::mt19937_64 rng(7);
  PinList scratch;
  // Around the radix cut-over (64) and well past it; slots needing one, two,
  // three and four bytes.
  for (size_t n : {0u, 1u, 2u, 63u, 64u, 65u, 130u, 300u}) {
    for (int64_t limit :
         {int64_t{256}, int64_t{4096}, int64_t{1} << 20, int64_t{1} << 30}) {
      if (static_cast<int64_t>(n) > limit) continue;
      std::vector<SessionPin> storage;
      PinList pins = RandomPins(rng, n, limit, storage);
      PinList want = pins;
      std::sort(want.begin(), want.end());
      SortBySlot(pins, scratch);
      ASSERT_EQ(pins, want) << "n=" << n << " limit=" << limit;
      for (const auto& [slot, pin] : pins) {
        ASSERT_EQ(pin->count, slot % 1000 + 1) << "pointer left its slot";
      }
    }
  }
}

TEST(SortBySlotTest, SortsAlreadySortedReversedAndExtremeSlots) {
  std::vector<SessionPin> storage(200);
  PinList scratch;
  PinList ascending, descending;
  for (int64_t i = 0; i < 200; ++i) {
    ascending.emplace_back(i * 5'000'000, &storage[i]);  // up to ~2^30
    descending.emplace_back((199 - i) * 5'000'000, &storage[199 - i]);
  }
  // Slot 0 and the largest slot a pool can have sit at the ends.
  PinList want = ascending;
  SortBySlot(ascending, scratch);
  EXPECT_EQ(ascending, want);
  SortBySlot(descending, scratch);
  EXPECT_EQ(descending, want);
}

TEST(SessionPinTest, RemoveReaderTakesOnlyThatReaderAndIgnoresStrangers) {
  Request a, b, c;
  SessionPin pin;
  pin.count = 3;
  pin.readers = {&a, &b, &c};
  pin.RemoveReader(&b);
  EXPECT_EQ(pin.readers.size(), 2u);
  EXPECT_TRUE(std::find(pin.readers.begin(), pin.readers.end(), &b) ==
              pin.readers.end());
  Request stranger;
  pin.RemoveReader(&stranger);
  EXPECT_EQ(pin.readers.size(), 2u);
  EXPECT_EQ(pin.count, 3) << "removing a reader leaves the pin count alone";
}

TEST(SessionTest, RemoveReaderOfAnUnpinnedSlotIsANoOp) {
  Session session;
  Request r;
  session.pins[4].count = 1;
  session.pins[4].readers.push_back(&r);
  session.RemoveReader(9, &r);  // not pinned: nothing happens
  EXPECT_EQ(session.pins.size(), 1u);
  EXPECT_EQ(session.pins[4].readers.size(), 1u);
  session.RemoveReader(4, &r);
  EXPECT_TRUE(session.pins[4].readers.empty());
  EXPECT_EQ(session.pins[4].count, 1) << "the pin outlives its reader";
}

TEST(SessionTest, SortedPinsListsEveryPinInSlotOrder) {
  Session session;
  std::mt19937_64 rng(11);
  std::vector<int64_t> slots;
  for (int i = 0; i < 150; ++i) {
    const int64_t s = static_cast<int64_t>(rng() % 100000);
    if (session.pins.contains(s)) continue;
    session.pins[s].count = 1;
    slots.push_back(s);
  }
  std::sort(slots.begin(), slots.end());
  PinList out, scratch;
  out.emplace_back(-1, nullptr);  // cleared first
  session.SortedPins(out, scratch);
  ASSERT_EQ(out.size(), slots.size());
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].first, slots[i]);
    EXPECT_EQ(out[i].second, &session.pins.at(slots[i]));
  }
}

}  // namespace
}  // namespace statecache
