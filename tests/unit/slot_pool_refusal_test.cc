// The bad-input table: every REQUIRES line of slot_pool.h, broken on a
// non-trivial pool. Each refused call must return the documented code, say
// what was wrong, and leave Dump() exactly as it was.
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/core/slot_pool.h"
#include "daemon/core/state_transfer.h"
#include "gtest/gtest.h"
#include "pool_test_util.h"

namespace statecache {
namespace {

using testing_util::Fork;
using testing_util::Lower;
using testing_util::MakePool;
using testing_util::Must;
using testing_util::Seq;
using testing_util::V;

using Code = absl::StatusCode;
constexpr Code kInvalid = Code::kInvalidArgument;
constexpr Code kPrecondition = Code::kFailedPrecondition;
constexpr Code kExhausted = Code::kResourceExhausted;

constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();

// The base pool (fork(1), readable_midstep, hash_block_size 64), built from
// 10 slots with the top one retired:
//   live:      1 (pinned once), 2, 5
//   fork src:  0 (pinned, deferred, carries hash 201)
//   reserved:  4 (outstanding reservation {4, 128, 102})
//   free:      3 (checkpoint 101), 6 (speculative checkpoint 103), 7, 8
//   retired:   9 (index still < capacity() == 10)
//   published: {3, 64, 101}, {6, 192, 103}; cancelled: {7, 256, 104}
//   relocation log: [(9, 2)]
constexpr int64_t kNumSlots = 9;
constexpr int64_t kCapacity = 10;
const Reservation kOutstanding{4, 128, 102};
const Reservation kPublished{3, 64, 101};
const Reservation kPublishedSpec{6, 192, 103};
const Reservation kCancelled{7, 256, 104};

constexpr char kBaseDump[] =
    R"({"checkpointed":[6,3],"checkpoints_dropped":0,"checkpoints_evicted":0,)"
    R"("checkpoints_kept":3,"checkpoints_orphaned":0,"deferred":[0],)"
    R"("free":[3,6,7,8],"hash_to_slot":[[101,3],[103,6],[201,0]],)"
    R"("num_slots":9,"pinned":[[0,1],[1,1]],"relocations":[[9,2]],)"
    R"("slot_hash":[201,-1,-1,101,-1,-1,103,-1,-1,-1],"speculative":[6]})";

SlotPool BuildBase() {
  SlotPool pool = MakePool(10, Fork(1, true));
  if (Must(pool.PopMany(3)) != V{0, 1, 2}) throw std::runtime_error("base");
  std::vector<Reservation> r =
      Must(pool.ReserveMidstep(Seq(-1, 1000), {{64, 101}, {128, 102}}));
  if (r != std::vector<Reservation>{kPublished, kOutstanding}) {
    throw std::runtime_error("base: reserve");
  }
  Must(pool.PublishMidstep({kPublished}, std::nullopt));
  if (Must(pool.Checkpoint(Seq(0, 900, 0, 832), 13, 201)) !=
      CheckpointResult{5, 0}) {
    throw std::runtime_error("base: checkpoint");
  }
  r = Must(pool.ReserveMidstep(Seq(-1, 1000), {{192, 103}}));
  if (r != std::vector<Reservation>{kPublishedSpec}) {
    throw std::runtime_error("base: reserve 2");
  }
  Must(pool.PublishMidstep(r, Seq(-1, 1000, 0, 0)));
  r = Must(pool.ReserveMidstep(Seq(-1, 1000), {{256, 104}}));
  if (r != std::vector<Reservation>{kCancelled}) {
    throw std::runtime_error("base: reserve 3");
  }
  Must(pool.CancelMidstep(r));
  Must(pool.Pin(1, false));
  if (Must(pool.RetireTop()) != SlotRetirement{9, -1, false}) {
    throw std::runtime_error("base: retire_top");
  }
  Must(pool.RecordRelocation(9, 2));
  return pool;
}

std::string CodeList(const std::vector<Code>& codes) {
  std::string out;
  for (Code c : codes) {
    if (!out.empty()) out += " or ";
    out += absl::StatusCodeToString(c);
  }
  return out;
}

// Makes the call and checks: refused with one of `codes`, message contains
// one of `needles` (case-insensitive), Dump() unchanged, invariants hold.
void ExpectRefused(SlotPool& pool,
                   const std::function<absl::Status(SlotPool&)>& call,
                   const std::vector<Code>& codes,
                   const std::vector<std::string>& needles) {
  const PoolSnapshot before = pool.Dump();
  const absl::Status s = call(pool);
  ASSERT_FALSE(s.ok()) << "accepted; dump now " << testing_util::DumpJson(pool);
  bool code_ok = false;
  for (Code c : codes) code_ok = code_ok || s.code() == c;
  EXPECT_TRUE(code_ok) << "got " << s << ", want " << CodeList(codes);
  const std::string msg = Lower(std::string(s.message()));
  bool named = needles.empty();
  for (const std::string& n : needles) {
    named = named || msg.find(Lower(n)) != std::string::npos;
  }
  EXPECT_TRUE(named) << "message \"" << s.message()
                     << "\" names none of the expected words";
  EXPECT_EQ(pool.Dump(), before) << "a refused call changed the pool";
  EXPECT_INVARIANTS(pool);
}

struct Case {
  std::string name;
  std::function<absl::Status(SlotPool&)> call;
  std::vector<Code> codes;
  std::vector<std::string> needles;
  std::function<void(SlotPool&)> prepare = nullptr;
};

template <typename T>
absl::Status St(const absl::StatusOr<T>& s) {
  return s.status();
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  const std::vector<int64_t> bad_slots = {
      -1, -5, kNumSlots, kCapacity, int64_t{1} << 40, kMax64, kMin64};
  auto range_needles = [](int64_t slot) {
    return std::vector<std::string>{std::to_string(slot), "range"};
  };
  const std::vector<std::string> kReservationWords = {"reserv"};

  // ---- counts ----
  cases.push_back({"HasFree(-1)",
                   [](SlotPool& p) { return St(p.HasFree(-1)); },
                   {kInvalid},
                   {"-1", "count", "negative"}});
  cases.push_back({"HasFree(min)",
                   [](SlotPool& p) { return St(p.HasFree(kMin64)); },
                   {kInvalid},
                   {std::to_string(kMin64), "count", "negative"}});
  cases.push_back({"PopMany(-1)",
                   [](SlotPool& p) { return St(p.PopMany(-1)); },
                   {kInvalid},
                   {"-1", "count", "negative"}});
  cases.push_back({"PopMany(NumFree+1)",
                   [](SlotPool& p) { return St(p.PopMany(5)); },
                   {kExhausted},
                   {"free", "5"}});
  cases.push_back({"PopMany(max)",
                   [](SlotPool& p) { return St(p.PopMany(kMax64)); },
                   {kExhausted},
                   {"free", std::to_string(kMax64)}});
  cases.push_back({"PopMany(2) into room for 1",
                   [](SlotPool& p) {
                     int64_t room[1];
                     return p.PopMany(2, absl::MakeSpan(room));
                   },
                   {kInvalid},
                   {"room", "1", "2"}});
  cases.push_back({"PopMany(max) into room for 1",
                   [](SlotPool& p) {
                     int64_t room[1];
                     return p.PopMany(kMax64, absl::MakeSpan(room));
                   },
                   {kExhausted},
                   {"free", std::to_string(kMax64)}});
  auto drain = [](SlotPool& p) { Must(p.PopMany(p.NumFree())); };
  cases.push_back({"Pop with nothing free",
                   [](SlotPool& p) { return St(p.Pop()); },
                   {kExhausted},
                   {"free", "empty", "exhaust"},
                   drain});
  cases.push_back({"PopMany(1) with nothing free",
                   [](SlotPool& p) { return St(p.PopMany(1)); },
                   {kExhausted},
                   {"free", "1"},
                   drain});
  cases.push_back({"Extend(-1)",
                   [](SlotPool& p) { return p.Extend(-1); },
                   {kInvalid},
                   {"-1", "count", "negative"}});
  cases.push_back(
      {"Extend beyond kMaxSlots",
       [](SlotPool& p) { return p.Extend(kMaxSlots - kNumSlots + 1); },
       {kInvalid},
       {std::to_string(kMaxSlots - kNumSlots + 1), std::to_string(kMaxSlots),
        "max", "exceed", "too"}});
  cases.push_back({"Extend(max int64)",
                   [](SlotPool& p) { return p.Extend(kMax64); },
                   {kInvalid},
                   {std::to_string(kMax64), std::to_string(kMaxSlots), "max",
                    "exceed", "too"}});

  // ---- slot out of range, for every method taking a slot ----
  using SlotCall = std::function<absl::Status(SlotPool&, int64_t)>;
  const std::vector<std::pair<std::string, SlotCall>> slot_methods = {
      {"Claim", [](SlotPool& p, int64_t s) { return p.Claim(s); }},
      {"MarkSpeculative",
       [](SlotPool& p, int64_t s) { return p.MarkSpeculative(s); }},
      {"Promote", [](SlotPool& p, int64_t s) { return p.Promote(s); }},
      {"Release", [](SlotPool& p, int64_t s) { return p.Release(s); }},
      {"Invalidate", [](SlotPool& p, int64_t s) { return p.Invalidate(s); }},
      {"Pin", [](SlotPool& p, int64_t s) { return p.Pin(s, false); }},
      {"Pin(next batch)",
       [](SlotPool& p, int64_t s) { return p.Pin(s, true); }},
      {"Unpin", [](SlotPool& p, int64_t s) { return p.Unpin(s); }},
      {"IsFree", [](SlotPool& p, int64_t s) { return St(p.IsFree(s)); }},
      {"HoldsCheckpoint",
       [](SlotPool& p, int64_t s) { return St(p.HoldsCheckpoint(s)); }},
      {"IsPinned", [](SlotPool& p, int64_t s) { return St(p.IsPinned(s)); }},
      {"PinCount", [](SlotPool& p, int64_t s) { return St(p.PinCount(s)); }},
  };
  for (const auto& [name, fn] : slot_methods) {
    for (int64_t slot : bad_slots) {
      cases.push_back({name + "(" + std::to_string(slot) + ")",
                       [fn = fn, slot](SlotPool& p) { return fn(p, slot); },
                       {kInvalid},
                       range_needles(slot)});
    }
  }
  for (int64_t slot : bad_slots) {
    if (slot == -1) continue;  // DropReader's documented no-op
    cases.push_back({"DropReader(" + std::to_string(slot) + ")",
                     [slot](SlotPool& p) { return p.DropReader(slot); },
                     {kInvalid},
                     range_needles(slot)});
  }
  cases.push_back({"DropReader(-2)",
                   [](SlotPool& p) { return p.DropReader(-2); },
                   {kInvalid},
                   range_needles(-2)});
  for (int64_t slot : bad_slots) {
    if (slot == -1) continue;  // ReleaseMany skips -1
    cases.push_back({"ReleaseMany({2, " + std::to_string(slot) + "})",
                     [slot](SlotPool& p) {
                       return p.ReleaseMany({2, slot});
                     },
                     {kInvalid},
                     range_needles(slot)});
  }
  cases.push_back({"RecordRelocation(-1, 0)",
                   [](SlotPool& p) { return p.RecordRelocation(-1, 0); },
                   {kInvalid},
                   range_needles(-1)});
  cases.push_back({"RecordRelocation(0, -1)",
                   [](SlotPool& p) { return p.RecordRelocation(0, -1); },
                   {kInvalid},
                   range_needles(-1)});
  cases.push_back({"RecordRelocation(capacity, 0)",
                   [](SlotPool& p) { return p.RecordRelocation(kCapacity, 0); },
                   {kInvalid},
                   range_needles(kCapacity)});
  cases.push_back({"RecordRelocation(0, capacity)",
                   [](SlotPool& p) { return p.RecordRelocation(0, kCapacity); },
                   {kInvalid},
                   range_needles(kCapacity)});
  cases.push_back({"RecordRelocation(max, 0)",
                   [](SlotPool& p) { return p.RecordRelocation(kMax64, 0); },
                   {kInvalid},
                   range_needles(kMax64)});

  // ---- release / claim / pin against the slot's state ----
  cases.push_back({"Release(vacant 7)",
                   [](SlotPool& p) { return p.Release(7); },
                   {kPrecondition},
                   {"free"}});
  cases.push_back({"Release(free checkpoint 3)",
                   [](SlotPool& p) { return p.Release(3); },
                   {kPrecondition},
                   {"free"}});
  cases.push_back({"Release(pinned 1)",
                   [](SlotPool& p) { return p.Release(1); },
                   {kPrecondition},
                   {"pinned"}});
  cases.push_back({"Release(pinned fork source 0)",
                   [](SlotPool& p) { return p.Release(0); },
                   {kPrecondition},
                   {"pinned"}});
  const std::vector<std::string> dup = {"duplicate", "twice", "more than once",
                                        "repeated"};
  cases.push_back({"ReleaseMany({2, 2})",
                   [](SlotPool& p) {
                     return p.ReleaseMany({2, 2});
                   },
                   {kInvalid},
                   dup});
  cases.push_back({"ReleaseMany({-1, 2, -1, 5, 2})",
                   [](SlotPool& p) {
                     return p.ReleaseMany({-1, 2, -1, 5, 2});
                   },
                   {kInvalid},
                   dup});
  cases.push_back({"ReleaseMany({2, 7 free})",
                   [](SlotPool& p) {
                     return p.ReleaseMany({2, 7});
                   },
                   {kPrecondition},
                   {"free"}});
  cases.push_back({"ReleaseMany({5, 1 pinned})",
                   [](SlotPool& p) {
                     return p.ReleaseMany({5, 1});
                   },
                   {kPrecondition},
                   {"pinned"}});
  cases.push_back({"Claim(live 2)",
                   [](SlotPool& p) { return p.Claim(2); },
                   {kPrecondition},
                   {"free"}});
  cases.push_back({"Claim(pinned 0)",
                   [](SlotPool& p) { return p.Claim(0); },
                   {kPrecondition},
                   {"free", "pinned"}});
  cases.push_back({"Claim(reserved 4)",
                   [](SlotPool& p) { return p.Claim(4); },
                   {kPrecondition},
                   {"free", "reserv"}});
  cases.push_back({"Pin(vacant 7)",
                   [](SlotPool& p) { return p.Pin(7, false); },
                   {kPrecondition},
                   {"free"}});
  cases.push_back({"Pin(free checkpoint 3)",
                   [](SlotPool& p) { return p.Pin(3, true); },
                   {kPrecondition},
                   {"free"}});
  cases.push_back({"Unpin(unpinned live 2)",
                   [](SlotPool& p) { return p.Unpin(2); },
                   {kPrecondition},
                   {"pinned"}});
  cases.push_back({"Unpin(vacant 7)",
                   [](SlotPool& p) { return p.Unpin(7); },
                   {kPrecondition},
                   {"pinned"}});

  // ---- hashes and hits ----
  const Sequence reader = Seq(-1, 1000);
  cases.push_back({"ResumableHit(hit > size)",
                   [reader](SlotPool& p) {
                     return St(p.ResumableHit(reader, 3, {101, 103}));
                   },
                   {kInvalid},
                   {"hit", "3"}});
  cases.push_back({"ResumableHit(hit -1)",
                   [reader](SlotPool& p) {
                     return St(p.ResumableHit(reader, -1, {101, 103}));
                   },
                   {kInvalid},
                   {"hit", "-1"}});
  cases.push_back({"ResumableHit(hit > size, assumed)",
                   [reader](SlotPool& p) {
                     return St(p.ResumableHit(reader, 1, {}, true));
                   },
                   {kInvalid},
                   {"hit", "1"}});
  cases.push_back({"ResumableHit(negative hash)",
                   [reader](SlotPool& p) {
                     return St(p.ResumableHit(reader, 2, {101, -7}));
                   },
                   {kInvalid},
                   {"hash", "-7"}});
  cases.push_back({"Lookup(-1)",
                   [](SlotPool& p) { return St(p.Lookup(-1)); },
                   {kInvalid},
                   {"hash", "-1"}});
  cases.push_back({"Lookup(min)",
                   [](SlotPool& p) { return St(p.Lookup(kMin64)); },
                   {kInvalid},
                   {"hash", std::to_string(kMin64)}});
  cases.push_back({"Unindex(-1)",
                   [](SlotPool& p) { return p.Unindex(-1); },
                   {kInvalid},
                   {"hash", "-1"}});
  cases.push_back({"ReserveMidstep(negative hash after a good one)",
                   [reader](SlotPool& p) {
                     return St(p.ReserveMidstep(reader, {{64, 11}, {128, -3}}));
                   },
                   {kInvalid},
                   {"hash", "-3"}});
  cases.push_back(
      {"ReserveMidstep(2 positions) into room for 1",
       [reader](SlotPool& p) {
         Reservation room[1];
         const std::pair<int64_t, int64_t> positions[] = {{64, 11}, {128, 12}};
         return St(p.ReserveMidstep(reader, positions, absl::MakeSpan(room)));
       },
       {kInvalid},
       {"room", "1", "2"}});

  // ---- publish / cancel ----
  using ResCall =
      std::function<absl::Status(SlotPool&, const std::vector<Reservation>&)>;
  const std::vector<std::pair<std::string, ResCall>> res_methods = {
      {"PublishMidstep(null seq)",
       [](SlotPool& p, const std::vector<Reservation>& r) {
         return p.PublishMidstep(r, std::nullopt);
       }},
      {"PublishMidstep(seq)",
       [](SlotPool& p, const std::vector<Reservation>& r) {
         return p.PublishMidstep(r, Seq(-1, 1000, 128, 0));
       }},
      {"CancelMidstep",
       [](SlotPool& p, const std::vector<Reservation>& r) {
         return p.CancelMidstep(r);
       }},
  };
  const std::vector<std::pair<std::string, std::vector<Reservation>>> bad_res =
      {
          {"never handed out (vacant slot)", {{7, 64, 999}}},
          {"never handed out (live slot)", {{2, 64, 999}}},
          {"never handed out (pinned slot)", {{0, 64, 999}}},
          {"slot out of range", {{kNumSlots, 64, 1}}},
          {"slot huge", {{kMax64, 64, 1}}},
          {"slot -1", {{-1, 64, 1}}},
          {"already published", {kPublished}},
          {"already published (speculative)", {kPublishedSpec}},
          {"already cancelled", {kCancelled}},
          {"wrong position", {{4, 129, 102}}},
          {"wrong hash", {{4, 128, 103}}},
          {"negative hash", {{4, 128, -102}}},
          {"duplicated", {kOutstanding, kOutstanding}},
          {"good then bad", {kOutstanding, {7, 64, 999}}},
          {"bad then good", {{4, 128, 103}, kOutstanding}},
      };
  for (const auto& [mname, fn] : res_methods) {
    for (const auto& [what, res] : bad_res) {
      cases.push_back(
          {mname + ": " + what,
           [fn = fn, res = res](SlotPool& p) { return fn(p, res); },
           {kInvalid, kPrecondition},
           {"reserv", "duplicate", "twice", "hash", "position", "range"}});
    }
    cases.push_back(
        {mname + ": pinned reservation",
         [fn = fn](SlotPool& p) { return fn(p, {kOutstanding}); },
         {kPrecondition, kInvalid},
         {"pinned"},
         [](SlotPool& p) { Must(p.Pin(kOutstanding.slot, false)); }});
  }

  // ---- release_pin ----
  for (int64_t slot : bad_slots) {
    cases.push_back({"ReleasePin(" + std::to_string(slot) + ", 1)",
                     [slot](SlotPool& p) { return p.ReleasePin(slot, 1); },
                     {kInvalid},
                     range_needles(slot)});
  }
  cases.push_back({"ReleasePin(pinned 1, -1)",
                   [](SlotPool& p) { return p.ReleasePin(1, -1); },
                   {kInvalid},
                   {"-1", "count", "negative"}});
  cases.push_back({"ReleasePin(pinned 1, 2 > PinCount)",
                   [](SlotPool& p) { return p.ReleasePin(1, 2); },
                   {kPrecondition, kInvalid},
                   {"pin", "2"}});
  cases.push_back({"ReleasePin(unpinned live 2, 1)",
                   [](SlotPool& p) { return p.ReleasePin(2, 1); },
                   {kPrecondition, kInvalid},
                   {"pin"}});
  cases.push_back({"ReleasePin(vacant 7, 1)",
                   [](SlotPool& p) { return p.ReleasePin(7, 1); },
                   {kPrecondition, kInvalid},
                   {"pin", "free"}});
  cases.push_back({"ReleasePin(pinned 1, 0)",
                   [](SlotPool& p) { return p.ReleasePin(1, 0); },
                   {kInvalid},
                   {"count", "0"}});
  for (int64_t slot : bad_slots) {
    cases.push_back({"EndDeferral(" + std::to_string(slot) + ")",
                     [slot](SlotPool& p) { return p.EndDeferral(slot); },
                     {kInvalid},
                     range_needles(slot)});
  }

  // ---- checkpoint ----
  cases.push_back({"Checkpoint(free vacant committed slot 7)",
                   [](SlotPool& p) {
                     return St(p.Checkpoint(Seq(7, 900, 0, 832), 13, 301));
                   },
                   {kPrecondition},
                   {"free"}});
  cases.push_back({"Checkpoint(free checkpoint committed slot 3)",
                   [](SlotPool& p) {
                     return St(p.Checkpoint(Seq(3, 900, 0, 832), 13, 301));
                   },
                   {kPrecondition},
                   {"free"}});
  for (int64_t slot : {kNumSlots, kCapacity, kMax64}) {
    cases.push_back({"Checkpoint(committed slot " + std::to_string(slot) + ")",
                     [slot](SlotPool& p) {
                       return St(p.Checkpoint(Seq(slot, 900, 0, 832), 13, 301));
                     },
                     {kInvalid},
                     range_needles(slot)});
  }
  cases.push_back({"Checkpoint(hash -1)",
                   [](SlotPool& p) {
                     return St(p.Checkpoint(Seq(2, 900, 0, 832), 13, -1));
                   },
                   {kInvalid},
                   {"hash", "-1"}});
  cases.push_back({"Checkpoint(hash -1, no committed slot)",
                   [](SlotPool& p) {
                     return St(p.Checkpoint(Seq(-1, 900, 0, 832), 13, -1));
                   },
                   {kInvalid},
                   {"hash", "-1"}});
  cases.push_back({"Checkpoint(boundary_blocks -1)",
                   [](SlotPool& p) {
                     return St(p.Checkpoint(Seq(2, 900, 0, 832), -1, 301));
                   },
                   {kInvalid},
                   {"boundary", "-1"}});
  return cases;
}

TEST(SlotPoolRefusal, BaseStateMatchesReference) {
  SlotPool pool = BuildBase();
  EXPECT_EQ(testing_util::DumpJson(pool), std::string(kBaseDump));
  EXPECT_EQ(pool.num_slots(), kNumSlots);
  EXPECT_EQ(pool.capacity(), kCapacity);
  EXPECT_EQ(pool.NumIndexed(), 3);
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRefusal, EveryPreconditionIsRefusedWithoutChange) {
  const std::vector<Case> cases = Cases();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    SlotPool pool = BuildBase();
    if (c.prepare) c.prepare(pool);
    ExpectRefused(pool, c.call, c.codes, c.needles);
  }
}

// After a refused publish the outstanding reservation is still good.
TEST(SlotPoolRefusal, RefusedPublishLeavesReservationUsable) {
  SlotPool pool = BuildBase();
  ExpectRefused(
      pool,
      [](SlotPool& p) {
        return p.PublishMidstep({kOutstanding, {7, 64, 999}}, std::nullopt);
      },
      {kInvalid, kPrecondition}, {});
  Must(pool.PublishMidstep({kOutstanding}, std::nullopt));
  EXPECT_EQ(Must(pool.Lookup(102)), 4);
  EXPECT_EQ(pool.Dump().checkpointed, (V{6, 3, 4}));
  // Now it is published: a second publish or a cancel is refused.
  ExpectRefused(pool,
                [](SlotPool& p) {
                  return p.PublishMidstep({kOutstanding}, std::nullopt);
                },
                {kInvalid, kPrecondition}, {"reserv"});
  ExpectRefused(pool,
                [](SlotPool& p) { return p.CancelMidstep({kOutstanding}); },
                {kInvalid, kPrecondition}, {"reserv"});
  EXPECT_INVARIANTS(pool);
}

// A cancelled reservation's slot reserved again under other terms: the old
// terms are refused, the new ones accepted.
TEST(SlotPoolRefusal,
     CancelledReservationSlotReReservedIsRefusedUnderOldTerms) {
  SlotPool pool = BuildBase();
  std::vector<Reservation> r =
      Must(pool.ReserveMidstep(Seq(-1, 1000), {{512, 105}}));
  ASSERT_EQ(r, (std::vector<Reservation>{{7, 512, 105}}));
  ExpectRefused(pool, [](SlotPool& p) { return p.CancelMidstep({kCancelled}); },
                {kInvalid, kPrecondition}, {"reserv", "position", "hash"});
  Must(pool.CancelMidstep(r));
  EXPECT_INVARIANTS(pool);
}

// A reserved slot handed back by Release (or moved by RetireTop) is no
// longer a reservation: publishing or cancelling it would release it twice.
TEST(SlotPoolRefusal, ReservationWhoseSlotWasReleasedOrRetiredIsRefused) {
  {
    SlotPool pool = BuildBase();
    Must(pool.Release(kOutstanding.slot));
    ExpectRefused(pool,
                  [](SlotPool& p) {
                    return p.PublishMidstep({kOutstanding}, std::nullopt);
                  },
                  {kInvalid, kPrecondition}, {"reserv", "free"});
    ExpectRefused(pool,
                  [](SlotPool& p) { return p.CancelMidstep({kOutstanding}); },
                  {kInvalid, kPrecondition}, {"reserv", "free"});
    EXPECT_EQ(Must(pool.Pop()), 4);  // lowest vacant again; still refused
    ExpectRefused(pool,
                  [](SlotPool& p) {
                    return p.PublishMidstep({kOutstanding}, std::nullopt);
                  },
                  {kInvalid, kPrecondition}, {"reserv"});
  }
  {
    SlotPool pool = MakePool(3, Fork(1, true));
    EXPECT_EQ(Must(pool.Pop()), 0);
    std::vector<Reservation> r =
        Must(pool.ReserveMidstep(Seq(-1, 1000), {{64, 1}, {128, 2}}));
    ASSERT_EQ(r, (std::vector<Reservation>{{1, 64, 1}, {2, 128, 2}}));
    Must(pool.Release(0));
    EXPECT_EQ(Must(pool.RetireTop()), (SlotRetirement{2, 0, false}));
    ExpectRefused(
        pool,
        [r](SlotPool& p) { return p.PublishMidstep({r[1]}, std::nullopt); },
        {kInvalid, kPrecondition}, {"range", "reserv"});
    Must(pool.Extend(1));
    ExpectRefused(pool, [r](SlotPool& p) { return p.CancelMidstep({r[1]}); },
                  {kInvalid, kPrecondition}, {"reserv"});
    Must(pool.PublishMidstep({r[0]}, std::nullopt));  // the other still good
    EXPECT_EQ(Must(pool.Lookup(1)), 1);
    EXPECT_INVARIANTS(pool);
  }
}

TEST(SlotPoolRefusal, RetireTopOnEmptyPool) {
  SlotPool empty = MakePool(0, Fork());
  ExpectRefused(empty, [](SlotPool& p) { return St(p.RetireTop()); },
                {kPrecondition}, {});
  SlotPool shrunk = MakePool(1, Fork());
  EXPECT_EQ(Must(shrunk.RetireTop()), (SlotRetirement{0, -1, false}));
  ExpectRefused(shrunk, [](SlotPool& p) { return St(p.RetireTop()); },
                {kPrecondition}, {});
}

TEST(SlotPoolRefusal, PopOnEmptyPool) {
  SlotPool empty = MakePool(0, Fork());
  ExpectRefused(empty, [](SlotPool& p) { return St(p.Pop()); }, {kExhausted},
                {});
  ExpectRefused(empty, [](SlotPool& p) { return St(p.PopMany(1)); },
                {kExhausted}, {});
  EXPECT_TRUE(Must(empty.PopMany(0)).empty());
}

TEST(SlotPoolRefusal, CreateRejectsBadConfiguration) {
  struct Row {
    const char* name;
    int64_t num_slots;
    StateTransfer transfer;
    int64_t hbs;
    std::vector<std::string> needles;
  };
  const StateTransfer copy =
      Must(StateTransfer::Create(TransferKind::kCopy, 0, false));
  const std::vector<Row> rows = {
      {"copy transfer", 8, copy, 64, {"copy"}},
      {"copy transfer, disabled-size pool", 0, copy, 64, {"copy"}},
      {"negative num_slots", -1, Fork(), 64, {"num_slots", "-1"}},
      {"num_slots beyond kMaxSlots",
       kMaxSlots + 1,
       Fork(),
       64,
       {"num_slots", std::to_string(kMaxSlots + 1)}},
      {"hash_block_size 0", 8, Fork(), 0, {"hash_block_size", "0"}},
      {"hash_block_size -1", 8, Fork(), -1, {"hash_block_size", "-1"}},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    absl::StatusOr<SlotPool> p =
        SlotPool::Create(r.num_slots, r.transfer, r.hbs);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), kInvalid) << p.status();
    const std::string msg = Lower(std::string(p.status().message()));
    bool named = false;
    for (const std::string& n : r.needles) {
      named = named || msg.find(Lower(n)) != std::string::npos;
    }
    EXPECT_TRUE(named) << p.status();
  }
  // The same configurations disabled are refused too (validation is not
  // skipped for a disabled pool).
  EXPECT_FALSE(SlotPool::Create(8, copy, 64, false).ok());
  EXPECT_FALSE(SlotPool::Create(8, Fork(), 0, false).ok());
}

TEST(SlotPoolRefusal, StateTransferCreateRejectsInvalidCombinations) {
  struct Row {
    TransferKind kind;
    int64_t fork_tokens;
    bool readable;
  };
  for (const Row& r : std::vector<Row>{{TransferKind::kFork, 0, false},
                                       {TransferKind::kFork, -1, true},
                                       {TransferKind::kNone, 1, false},
                                       {TransferKind::kNone, 0, true},
                                       {TransferKind::kReplay, -1, false},
                                       {TransferKind::kCopy, -2, false}}) {
    SCOPED_TRACE(testing::Message() << TransferKindName(r.kind) << " "
                                    << r.fork_tokens << " " << r.readable);
    absl::StatusOr<StateTransfer> t =
        StateTransfer::Create(r.kind, r.fork_tokens, r.readable);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), kInvalid);
    EXPECT_FALSE(t.status().message().empty());
  }
  // And the valid ones.
  EXPECT_TRUE(StateTransfer::Create(TransferKind::kNone, 0, false).ok());
  EXPECT_TRUE(StateTransfer::Create(TransferKind::kFork, 1, true).ok());
  EXPECT_TRUE(StateTransfer::Create(TransferKind::kReplay, 0, true).ok());
  EXPECT_TRUE(StateTransfer::Create(TransferKind::kReplay, 3, false).ok());
  EXPECT_TRUE(StateTransfer::Create(TransferKind::kCopy, 0, false).ok());
  EXPECT_FALSE(ParseTransferKind("fork2").ok());
  EXPECT_EQ(Must(ParseTransferKind("replay")), TransferKind::kReplay);
}

// Calls that look like misuse but are documented no-ops must be accepted.
TEST(SlotPoolRefusal, DocumentedNoOpsAreAccepted) {
  SlotPool pool = BuildBase();
  const PoolSnapshot before = pool.Dump();
  Must(pool.DropReader(-1));
  Must(pool.DropReader(2));  // unpinned: the pin clock already returned it
  Must(pool.ReleaseMany({}));
  Must(pool.ReleaseMany({-1, -1}));
  Must(pool.Unindex(424242));
  Must(pool.Invalidate(7));
  Must(pool.Promote(7));
  Must(pool.Extend(0));
  Must(pool.PublishMidstep({}, std::nullopt));
  Must(pool.CancelMidstep({}));
  EXPECT_TRUE(Must(pool.PopMany(0)).empty());
  EXPECT_TRUE(Must(pool.HasFree(0)));
  EXPECT_EQ(Must(pool.ResumableHit(Seq(-1, 1000), 0, {})), 0);
  EXPECT_EQ(pool.Dump(), before);
  // RecordRelocation of a retired index (< capacity) is allowed.
  Must(pool.RecordRelocation(kCapacity - 1, 0));
  EXPECT_INVARIANTS(pool);
}

}  // namespace
}  // namespace statecache
