// Session's per-slot pin bookkeeping: slot order for the clock, readers.
#include "daemon/service/session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/service/sessions.h"

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

// SessionPins against a std::map doing the same: finds, adds, erases (one
// by one, which moves the last entry, and in sweeps) and clears, over slots
// spread across a large index.
TEST(SessionPinsTest, MatchesAnOrderedMapUnderRandomChanges) {
  SessionPins pins;
  std::map<int64_t, int32_t> want;
  std::mt19937_64 rng(23);
  for (int step = 0; step < 20000; ++step) {
    const int64_t slot = static_cast<int64_t>(rng() % 3000);
    switch (rng() % 8) {
      case 0:
      case 1:
      case 2:
        ++pins[slot].count;
        ++want[slot];
        break;
      case 3:
      case 4: {
        auto it = pins.find(slot);
        ASSERT_EQ(it != pins.end(), want.contains(slot)) << slot;
        if (it != pins.end()) {
          EXPECT_EQ(it->first, slot);
          pins.erase(it);
          want.erase(slot);
        }
        break;
      }
      case 5:
        if (rng() % 50 == 0) {
          pins.EraseIf([](const SessionPins::value_type& e) {
            return e.second.count % 2 == 0;
          });
          std::erase_if(want, [](const auto& e) { return e.second % 2 == 0; });
        }
        break;
      case 6:
        if (rng() % 500 == 0) {
          pins.clear();
          want.clear();
        }
        break;
      default:
        EXPECT_EQ(pins.contains(slot), want.contains(slot)) << slot;
        EXPECT_FALSE(pins.contains(-1 - slot));
        EXPECT_TRUE(pins.find(-1 - slot) == pins.end());
        break;
    }
    ASSERT_EQ(pins.size(), want.size());
    ASSERT_EQ(pins.empty(), want.empty());
  }
  std::map<int64_t, int32_t> got;
  for (const auto& [slot, pin] : pins) {
    EXPECT_TRUE(got.emplace(slot, pin.count).second) << "slot twice: " << slot;
    EXPECT_EQ(&pins.at(slot), &pin);
  }
  EXPECT_EQ(got, want);
}

// FindRequest tries the request named after the recent one before the map;
// whatever order names them, and whichever leave, it finds exactly the
// request named (or none), and the naming order never reaches one that left.
TEST(SessionTest, FindRequestFindsTheNamedRequestInAnyNamingOrder) {
  Session session;
  std::mt19937_64 rng(5);
  std::vector<std::string> live;
  int next_id = 0;
  auto admit = [&] {
    auto request = std::make_unique<Request>();
    // Ids of every length FindRequest compares inline (up to 16 bytes) and
    // past it, sharing long prefixes so that only their ends tell them apart.
    request->id = absl::StrCat(std::string(next_id % 19, 'x'), next_id);
    ++next_id;
    request->session = &session;
    session.NameNext(request.get());
    live.push_back(request->id);
    session.requests.emplace(request->id, std::move(request));
  };
  for (int i = 0; i < 20; ++i) admit();
  for (int round = 0; round < 2000; ++round) {
    const uint64_t what = rng() % 10;
    if (what == 0 && !live.empty()) {  // one leaves, as Release does
      const size_t k = rng() % live.size();
      Request* request = session.requests.at(live[k]).get();
      session.Unname(*request);
      session.requests.erase(live[k]);
      live.erase(live.begin() + k);
    } else if (what == 1) {
      admit();
    } else if (!live.empty()) {
      // Mostly in admission order, as a scheduler's passes name them.
      const size_t k = what < 6 ? round % live.size() : rng() % live.size();
      absl::StatusOr<Request*> found = FindRequest(session, live[k]);
      ASSERT_TRUE(found.ok()) << found.status();
      EXPECT_EQ((*found)->id, live[k]);
      EXPECT_EQ(*found, session.requests.at(live[k]).get());
    }
    EXPECT_FALSE(FindRequest(session, "gone").ok());
    EXPECT_FALSE(FindRequest(session, "xxxxxxxxxxxxxxxxxxxx").ok());
    for (const auto& [id, request] : session.requests) {
      for (const Request* n : {request->named_prev, request->named_next}) {
        if (n != nullptr) {
          EXPECT_TRUE(session.requests.contains(n->id));
        }
      }
    }
  }
}

}  // namespace
}  // namespace statecache
