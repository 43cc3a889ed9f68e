// Session's per-slot pin bookkeeping: slot order for the clock, readers.
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
