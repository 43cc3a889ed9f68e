// The packed form of a Step (PackedOperations / PackedResults), tested on
// the core without any RPC stack (the codec's layouts against the rule in
// statecache.proto are tests/proto/packed_codec_test.cc's):
//  * twin daemons, one sent each random step as a list and the other the
//    same step packed, make the same decisions: the same results (the packed
//    ones written exactly as the list-form PackResults writes the list's),
//    the same refusals, the same pool;
//  * a malformed packed step is refused whole and changes nothing;
//  * the list-form converters round-trip, and agree with the daemon's own
//    validation on which columns are well formed (UnpackOperations checks
//    with it; the reflection walk of the rule that the validation is held
//    to is tests/proto/packed_codec_test.cc's).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/service/state_cache.h"
#include "gtest/gtest.h"
#include "proto/packed_codec.h"
#include "proto/packed_form.h"
#include "tests/service/cache_with_memory.h"
#include "tests/service/fake_clock.h"
#include "tests/service/random_operations.h"

namespace statecache {
namespace {

constexpr int64_t kSlots = 12;
constexpr int kMaxOps = 8;

v1::Identity Identity() { return TestIdentity("packed/model"); }

std::unique_ptr<StateCache> NewCache(FakeClock* clock, const char* prefix) {
  return NewCacheWithMemory(Identity(), clock, prefix, kSlots, kSlots, kMaxOps);
}

std::string Attach(StateCache& cache) {
  v1::AttachRequest req;
  *req.mutable_identity() = Identity();
  v1::AttachResponse resp;
  EXPECT_TRUE(cache.Attach(req, &resp).ok());
  return resp.session_id();
}

v1::StepRequest Packed(const v1::StepRequest& list) {
  v1::StepRequest packed;
  packed.set_session_id(list.session_id());
  EXPECT_TRUE(PackOperations(list.operations(), packed.mutable_packed()).ok());
  return packed;
}

TEST(PackedStepTest, TwinDaemonsMakeTheSameDecisions) {
  FakeClock clock;
  std::unique_ptr<StateCache> listed = NewCache(&clock, "packed_test_list");
  std::unique_ptr<StateCache> packed = NewCache(&clock, "packed_test_pack");
  const std::string list_session = Attach(*listed);
  const std::string packed_session = Attach(*packed);
  Draw draw(20261130);
  int64_t ok_results = 0, refusals = 0, whole_refusals = 0;
  for (int step = 0; step < 20000; ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    v1::StepRequest req;
    const int64_t ops = draw.Chance(3) ? kMaxOps + 1 : 1 + draw.Below(kMaxOps);
    for (int64_t k = 0; k < ops; ++k) draw.Operation(req.add_operations());
    req.set_session_id(list_session);
    v1::StepRequest packed_req = Packed(req);
    packed_req.set_session_id(packed_session);

    v1::StepResponse list_resp, packed_resp;
    const absl::Status list_status = listed->Step(req, &list_resp);
    const absl::Status packed_status = packed->Step(packed_req, &packed_resp);
    ASSERT_EQ(list_status, packed_status) << req.ShortDebugString();
    if (!list_status.ok()) {
      ++whole_refusals;
      continue;
    }
    ASSERT_EQ(packed_resp.results_size(), 0);
    ASSERT_EQ(list_resp.packed_results().codes_size(), 0);
    // The daemon's own packed results are exactly the list's, packed by
    // the generic rule; unpacked, they are the list's results.
    v1::PackedResults want;
    ASSERT_TRUE(PackResults(list_resp.results(), &want).ok());
    ASSERT_EQ(packed_resp.packed_results().SerializeAsString(),
              want.SerializeAsString())
        << req.ShortDebugString() << "\nlist: " << list_resp.ShortDebugString()
        << "\npacked: " << packed_resp.ShortDebugString();
    google::protobuf::RepeatedPtrField<v1::OperationResult> unpacked;
    ASSERT_TRUE(UnpackResults(packed_resp.packed_results(),
                              packed_req.packed().kinds(), &unpacked)
                    .ok());
    for (int i = 0; i < list_resp.results_size(); ++i) {
      ASSERT_EQ(unpacked[i].SerializeAsString(),
                list_resp.results(i).SerializeAsString());
      (list_resp.results(i).code() == 0 ? ok_results : refusals) += 1;
    }
    ASSERT_EQ(listed->DumpPool(), packed->DumpPool());
    if (draw.Chance(1)) {  // time passes alike for both
      clock.Advance(absl::Seconds(1));
      listed->Tick();
      packed->Tick();
    }
  }
  ASSERT_TRUE(listed->CheckInvariants().ok());
  ASSERT_TRUE(packed->CheckInvariants().ok());
  // Both successes and refusals of every kind were compared.
  EXPECT_GT(ok_results, 20000);
  EXPECT_GT(refusals, 20000);
  EXPECT_GT(whole_refusals, 300);
  v1::GetStatsResponse stats;
  packed->GetStats(&stats);
  EXPECT_GT(stats.checkpoints_kept(), 100) << stats.ShortDebugString();
  EXPECT_GT(stats.resumes_fork(), 10) << stats.ShortDebugString();
}

TEST(PackedStepTest, MalformedPackedStepIsRefusedWholeAndChangesNothing) {
  FakeClock clock;
  std::unique_ptr<StateCache> cache = NewCache(&clock, "packed_test_bad");
  const std::string session = Attach(*cache);
  // A valid pass: admit, checkpoint it, query.
  v1::StepRequest good;
  good.set_session_id(session);
  v1::Admit* a = good.add_operations()->mutable_admit();
  a->set_request_id("r1");
  a->set_width(1);
  a->set_num_tokens(200);
  a->add_block_hashes(11);
  a->add_block_hashes(12);
  v1::Checkpoint* c = good.add_operations()->mutable_checkpoint();
  c->set_request_id("r1");
  c->set_boundary_blocks(2);
  c->set_hash(12);
  good.add_operations()->mutable_lookup()->set_hash(12);
  const v1::StepRequest valid = Packed(good);

  struct Case {
    const char* name;
    std::function<void(v1::StepRequest&)> spoil;
    const char* message;  // a part of the refusal's message
  };
  const std::vector<Case> cases = {
      {"unknown kind", [](auto& r) { r.mutable_packed()->set_kinds(2, 16); },
       "operation 2 has unknown kind 16"},
      {"kind 0", [](auto& r) { r.mutable_packed()->set_kinds(0, 0); },
       "operation 0 has unknown kind 0"},
      {"args one short",
       [](auto& r) { r.mutable_packed()->mutable_args()->RemoveLast(); },
       "args is too short"},
      {"args one too many", [](auto& r) { r.mutable_packed()->add_args(0); },
       "args has 8 entries; the kinds use 7"},
      {"hashes one short",
       [](auto& r) { r.mutable_packed()->mutable_hashes()->RemoveLast(); },
       "operation 2 (lookup): hashes is too short"},
      {"hashes one too many",
       [](auto& r) { r.mutable_packed()->add_hashes(5); },
       "hashes has 5 entries; the kinds use 4"},
      {"a length past the hashes",
       [](auto& r) { r.mutable_packed()->set_args(3, 9); },
       "length 9 runs past the end of hashes"},
      {"a negative length",
       [](auto& r) { r.mutable_packed()->set_args(3, -1); },
       "negative length -1"},
      {"width beyond int32",
       [](auto& r) { r.mutable_packed()->set_args(0, int64_t{1} << 33); },
       "args value 8589934592 is beyond int32"},
      {"an id length past the bytes",
       [](auto& r) { r.mutable_packed()->set_request_id_lengths(1, 3); },
       "request_ids is shorter than request_id_lengths say"},
      {"an id length missing",
       [](auto& r) {
         r.mutable_packed()->mutable_request_id_lengths()->RemoveLast();
       },
       "operation 1 (checkpoint): request_id_lengths has too few entries"},
      {"id bytes left over",
       [](auto& r) { r.mutable_packed()->mutable_request_ids()->append("x"); },
       "request_ids has 5 bytes; request_id_lengths use 4"},
      {"both forms", [&](auto& r) { *r.add_operations() = good.operations(0); },
       "both `operations` and `packed`"},
      {"too many operations",
       [](auto& r) {
         for (int i = 0; i < kMaxOps; ++i) r.mutable_packed()->add_kinds(1);
       },
       "at most 8"},
  };
  const std::string before = Visible(*cache);
  const PoolSnapshot pool_before = cache->DumpPool();
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    v1::StepRequest bad = valid;
    tc.spoil(bad);
    v1::StepResponse resp;
    const absl::Status status = cache->Step(bad, &resp);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
    EXPECT_NE(status.message().find(tc.message), std::string::npos)
        << status.message();
    EXPECT_EQ(Visible(*cache), before);
    EXPECT_EQ(cache->DumpPool(), pool_before);
  }
  // A bool given 2: publish's keep_all.
  v1::StepRequest bool_bad;
  bool_bad.set_session_id(session);
  bool_bad.mutable_packed()->add_kinds(v1::Operation::kPublish);
  bool_bad.mutable_packed()->set_request_ids("r1");
  bool_bad.mutable_packed()->add_request_id_lengths(2);
  bool_bad.mutable_packed()->add_args(2);
  v1::StepResponse resp;
  const absl::Status status = cache->Step(bool_bad, &resp);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_NE(status.message().find("args value 2 is not a bool"),
            std::string::npos)
      << status;
  EXPECT_EQ(Visible(*cache), before);

  // The valid pass still runs, and its results read back by the rule.
  resp.Clear();
  ASSERT_TRUE(cache->Step(valid, &resp).ok());
  google::protobuf::RepeatedPtrField<v1::OperationResult> results;
  ASSERT_TRUE(
      UnpackResults(resp.packed_results(), valid.packed().kinds(), &results)
          .ok());
  ASSERT_EQ(results.size(), 3);
  EXPECT_EQ(results[0].code(), 0) << results[0].message();
  EXPECT_EQ(results[0].admit().slots_size(), 1);
  EXPECT_EQ(results[1].code(), 0) << results[1].message();
  EXPECT_TRUE(results[1].checkpoint().kept());
  EXPECT_EQ(results[2].lookup().slot(), results[1].checkpoint().fork_src());
  EXPECT_EQ(results[1].checkpoint().fork_src(), results[0].admit().slots(0));
}

TEST(PackedFormTest, ConvertersRoundTripAndAgreeWithTheDaemonOnValidity) {
  Draw draw(7);
  int64_t valid = 0, invalid = 0;
  for (int i = 0; i < 5000; ++i) {
    google::protobuf::RepeatedPtrField<v1::Operation> ops;
    for (int64_t k = 1 + draw.Below(6); k > 0; --k) draw.Operation(ops.Add());
    v1::PackedOperations packed;
    ASSERT_TRUE(PackOperations(ops, &packed).ok());
    ASSERT_TRUE(ValidatePackedOperations(packed).ok());
    google::protobuf::RepeatedPtrField<v1::Operation> back;
    ASSERT_TRUE(UnpackOperations(packed, &back).ok());
    ASSERT_EQ(back.size(), ops.size());
    for (int k = 0; k < ops.size(); ++k) {
      ASSERT_EQ(back[k].SerializeAsString(), ops[k].SerializeAsString());
    }
    // One random spoiling of one column: the daemon's validation and the
    // list-form reader say the same.
    switch (draw.Below(5)) {
      case 0:
        if (packed.args_size() > 0) {
          packed.set_args(static_cast<int>(draw.Below(packed.args_size())),
                          draw.Pick({-1, 0, 2, 5, int64_t{1} << 40}));
        }
        break;
      case 1:
        packed.add_args(draw.Below(3));
        break;
      case 2:
        if (packed.hashes_size() > 0) packed.mutable_hashes()->RemoveLast();
        break;
      case 3:
        if (packed.request_id_lengths_size() > 0) {
          packed.set_request_id_lengths(
              static_cast<int>(draw.Below(packed.request_id_lengths_size())),
              static_cast<uint32_t>(draw.Below(8)));
        }
        break;
      case 4:
        packed.set_kinds(static_cast<int>(draw.Below(packed.kinds_size())),
                         static_cast<uint32_t>(draw.Below(18)));
        break;
    }
    const bool daemon_ok = ValidatePackedOperations(packed).ok();
    const bool generic_ok = UnpackOperations(packed, &back).ok();
    ASSERT_EQ(daemon_ok, generic_ok) << packed.ShortDebugString();
    (daemon_ok ? valid : invalid) += 1;
  }
  // Spoiling found both outcomes often.
  EXPECT_GT(valid, 1000);
  EXPECT_GT(invalid, 1000);
}

}  // namespace
}  // namespace statecache
