// StateCache over a state memory that fails on demand: a FaultInjectingDevice
// wrapping a real HostDevice. Every path that copies slot contents (a
// snapshot, an explicit copy, the relocations of a shrink) and the one that
// allocates memory (a grow) is made to fail, and the test checks what a
// scheduler and an operator would see: the error in the operation's result
// (code and a message naming what failed), no checkpoint indexed over bytes
// that were not written (a later lookup and resumable_hit miss it), none
// counted kept, and a pool that stays consistent (CheckInvariants, no slot
// leaked). Each test runs with the list form and the packed form of Step.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/device/fault_injecting_device.h"
#include "daemon/device/host_device.h"
#include "daemon/service/state_cache.h"
#include "gtest/gtest.h"
#include "proto/packed_form.h"
#include "tests/service/fake_clock.h"
#include "tests/service/test_identity.h"

namespace statecache {
namespace {

constexpr int64_t kBlock = kTestBlock;

// Operations, tersely.
v1::Operation AdmitOp(const std::string& id, int width,
                      const std::vector<int64_t>& hashes = {}, int kv_hit = 0,
                      int64_t anchor_pos = 0) {
  v1::Operation op;
  v1::Admit* a = op.mutable_admit();
  a->set_request_id(id);
  a->set_width(width);
  a->set_num_tokens(10 * kBlock);
  a->set_anchor_pos(anchor_pos);
  for (int64_t h : hashes) a->add_block_hashes(h);
  a->set_kv_hit_blocks(kv_hit);
  return op;
}
v1::Operation SnapshotOp(const std::string& id, int64_t position,
                         int64_t hash) {
  v1::Operation op;
  op.mutable_snapshot()->set_request_id(id);
  op.mutable_snapshot()->set_position(position);
  op.mutable_snapshot()->set_hash(hash);
  return op;
}
v1::Operation CheckpointOp(const std::string& id, int64_t blocks,
                           int64_t hash) {
  v1::Operation op;
  op.mutable_checkpoint()->set_request_id(id);
  op.mutable_checkpoint()->set_boundary_blocks(blocks);
  op.mutable_checkpoint()->set_hash(hash);
  return op;
}
v1::Operation CopyOp(const std::string& id, int from, int to) {
  v1::Operation op;
  op.mutable_copy()->set_request_id(id);
  op.mutable_copy()->set_from_index(from);
  op.mutable_copy()->set_to_index(to);
  return op;
}
v1::Operation ReleaseOp(const std::string& id) {
  v1::Operation op;
  op.mutable_release()->set_request_id(id);
  return op;
}
v1::Operation LookupOp(int64_t hash) {
  v1::Operation op;
  op.mutable_lookup()->set_hash(hash);
  return op;
}
// The blocks a request of 10 blocks could resume from `hash`, filed as its
// first block.
v1::Operation ResumableHitOp(int64_t hash) {
  v1::Operation op;
  op.mutable_resumable_hit()->set_num_tokens(10 * kBlock);
  op.mutable_resumable_hit()->set_kv_hit_blocks(1);
  op.mutable_resumable_hit()->add_block_hashes(hash);
  return op;
}
v1::Operation BeginPassOp() {
  v1::Operation op;
  op.mutable_begin_pass();
  return op;
}

class DeviceFaultTest : public ::testing::TestWithParam<bool> {
 protected:
  static constexpr int64_t kSlots = 8;

  void SetUp() override {
    HostDeviceOptions host;
    host.layout = *StateLayout::Create(
        "fault", {{"conv", {3, 8}, DType::kBF16}, {"ssm", {2, 4}, DType::kF32}},
        2);
    host.num_slots = kSlots;
    host.max_slots = 2 * kSlots;
    host.epoch = NewEpoch(absl::Now());
    host.prefix = "statecache_fault_test";
    absl::StatusOr<std::unique_ptr<HostDevice>> created =
        HostDevice::Create(host);
    ASSERT_TRUE(created.ok()) << created.status();
    device_ = std::make_shared<FaultInjectingDevice>(std::move(*created));
    StateCacheOptions options;
    options.identity = TestIdentity();
    options.num_slots = kSlots;
    options.max_slots = 2 * kSlots;
    options.transfer = *StateTransfer::Create(TransferKind::kFork, 1, true);
    options.max_operations_per_step = 64;
    options.epoch = 7;
    options.clock = &clock_;
    options.device = device_;
    absl::StatusOr<std::unique_ptr<StateCache>> cache =
        StateCache::Create(std::move(options));
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = *std::move(cache);
    v1::AttachRequest attach;
    *attach.mutable_identity() = TestIdentity();
    v1::AttachResponse attached;
    ASSERT_TRUE(cache_->Attach(attach, &attached).ok());
    session_ = attached.session_id();
  }

  // Runs `ops` as one Step, in the form the test's parameter names, and
  // returns its results as list-form results either way.
  std::vector<v1::OperationResult> Run(std::vector<v1::Operation> ops) {
    v1::StepRequest request;
    request.set_session_id(session_);
    for (v1::Operation& op : ops) *request.add_operations() = std::move(op);
    const bool packed = GetParam();
    if (packed) {
      v1::PackedOperations columns;
      EXPECT_TRUE(PackOperations(request.operations(), &columns).ok());
      request.clear_operations();
      *request.mutable_packed() = std::move(columns);
    }
    v1::StepResponse response;
    const absl::Status status = cache_->Step(request, &response);
    EXPECT_TRUE(status.ok()) << status;
    if (packed) {
      google::protobuf::RepeatedPtrField<v1::OperationResult> results;
      const absl::Status unpacked = UnpackResults(
          response.packed_results(), request.packed().kinds(), &results);
      EXPECT_TRUE(unpacked.ok()) << unpacked;
      return {results.begin(), results.end()};
    }
    return {response.results().begin(), response.results().end()};
  }

  v1::GetStatsResponse Stats() {
    v1::GetStatsResponse stats;
    cache_->GetStats(&stats);
    return stats;
  }

  // Runs a resize to `target`; its outcome, or UNKNOWN while it is still
  // pending. The callback's targets outlive the cache: a resize left
  // pending completes (CANCELLED) only when the cache is destroyed.
  // Resizes; a shrink still pending (a live slot at the top) gets the
  // session's next begin_pass, where its live slots move.
  absl::Status Resize(int64_t target, v1::ResizeResponse* out = nullptr,
                      int64_t deadline_ms = 0) {
    v1::ResizeRequest request;
    request.set_target_slots(target);
    request.set_deadline_ms(deadline_ms);
    auto result = std::make_shared<std::pair<absl::Status, v1::ResizeResponse>>(
        absl::UnknownError("resize still pending"), v1::ResizeResponse());
    cache_->Resize(request,
                   [result](absl::Status status, const v1::ResizeResponse& r) {
                     result->first = std::move(status);
                     result->second = r;
                   });
    if (result->first.code() == absl::StatusCode::kUnknown) {
      Run({BeginPassOp()});
    }
    if (out != nullptr) *out = result->second;
    return result->first;
  }

  // Slots neither live, pinned nor reserved must be free: used counts only
  // the slots the session's requests hold.
  void ExpectConsistent(int64_t live_slots) {
    EXPECT_TRUE(cache_->CheckInvariants().ok()) << cache_->CheckInvariants();
    const PoolSnapshot pool = cache_->DumpPool();
    EXPECT_EQ(pool.num_slots - static_cast<int64_t>(pool.free.size()),
              live_slots)
        << "slots leaked or lost";
  }

  FakeClock clock_;
  std::shared_ptr<FaultInjectingDevice> device_;
  std::unique_ptr<StateCache> cache_;
  std::string session_;
};

INSTANTIATE_TEST_SUITE_P(BothForms, DeviceFaultTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& form) {
                           return form.param ? "Packed" : "List";
                         });

TEST_P(DeviceFaultTest, ASnapshotWhoseCopyFailsIsReportedAndNeverFiled) {
  ASSERT_EQ(Run({AdmitOp("r", 1)})[0].code(), 0);
  const int64_t kept_before = Stats().checkpoints_kept();
  // The device runs the copy, then reports a failure: bytes were written,
  // but nothing vouches for them.
  device_->FailNthCopy(1, absl::InternalError("DMA engine hung"),
                       /*forward=*/true);
  const std::vector<v1::OperationResult> results =
      Run({SnapshotOp("r", kBlock, 777), LookupOp(777), ResumableHitOp(777)});
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].code(), static_cast<int>(absl::StatusCode::kInternal));
  // What failed, and the pair: the committed slot 0 into the destination 1.
  EXPECT_TRUE(absl::StartsWith(
      results[0].message(),
      "snapshot: the state memory failed to copy 1 slot (0 -> 1): "))
      << results[0].message();
  EXPECT_TRUE(absl::StrContains(results[0].message(), "DMA engine hung"))
      << results[0].message();
  EXPECT_EQ(results[1].lookup().slot(), -1);
  EXPECT_EQ(results[2].resumable_hit().blocks(), 0);
  EXPECT_EQ(Stats().checkpoints_kept(), kept_before);
  ExpectConsistent(/*live_slots=*/1);
  EXPECT_EQ(device_->counts().copies_failed, 1);

  // The fault was one-shot: the same snapshot now files and counts.
  const std::vector<v1::OperationResult> again =
      Run({SnapshotOp("r", kBlock, 777), LookupOp(777)});
  EXPECT_EQ(again[0].code(), 0) << again[0].message();
  EXPECT_TRUE(again[0].snapshot().kept());
  EXPECT_EQ(again[1].lookup().slot(), again[0].snapshot().slot());
  EXPECT_EQ(Stats().checkpoints_kept(), kept_before + 1);
  ExpectConsistent(/*live_slots=*/1);
}

TEST_P(DeviceFaultTest, ASnapshotThatSpentACheckpointAndFailedFilesNeither) {
  // Every slot but the committed one holds a checkpoint, so the snapshot's
  // destination is the LRU head: spent (counted evicted) before the copy
  // runs, and not given back after it fails (the copy may have written it).
  // Snapshots at the request's anchor are not guesses: filed in LRU order,
  // oldest (101) at the head.
  ASSERT_EQ(Run({AdmitOp("r", 1, {}, 0, /*anchor_pos=*/kBlock)})[0].code(), 0);
  for (int64_t h = 1; h < kSlots; ++h) {
    ASSERT_TRUE(Run({SnapshotOp("r", kBlock, 100 + h)})[0].snapshot().kept());
  }
  const v1::GetStatsResponse before = Stats();
  device_->FailAllCopies(absl::InternalError("ECC error"));
  const std::vector<v1::OperationResult> results =
      Run({SnapshotOp("r", kBlock, 999), LookupOp(999), LookupOp(101)});
  EXPECT_EQ(results[0].code(), static_cast<int>(absl::StatusCode::kInternal));
  EXPECT_TRUE(absl::StrContains(results[0].message(), "ECC error"))
      << results[0].message();
  EXPECT_EQ(results[1].lookup().slot(), -1);  // never filed
  EXPECT_EQ(results[2].lookup().slot(), -1);  // the spent LRU head
  const v1::GetStatsResponse after = Stats();
  EXPECT_EQ(after.checkpoints_kept(), before.checkpoints_kept());
  EXPECT_EQ(after.checkpoints_evicted(), before.checkpoints_evicted() + 1);
  // The destination went back vacant, not filed and not leaked.
  const PoolSnapshot pool = cache_->DumpPool();
  EXPECT_EQ(pool.checkpointed.size(), static_cast<size_t>(kSlots - 2));
  ExpectConsistent(/*live_slots=*/1);
}

TEST_P(DeviceFaultTest, AFailedCopyIsReportedAndChangesNothing) {
  const std::vector<v1::OperationResult> admitted = Run({AdmitOp("r", 2)});
  ASSERT_EQ(admitted[0].code(), 0);
  const int64_t to_slot = admitted[0].admit().slots(1);
  device_->FailCopiesTouching(to_slot, absl::UnavailableError("link down"));
  const std::string dump = cache_->DebugDump();
  const std::vector<v1::OperationResult> results = Run({CopyOp("r", 0, 1)});
  EXPECT_EQ(results[0].code(),
            static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(absl::StartsWith(results[0].message(),
                               "copy: the state memory failed to copy 1 slot"))
      << results[0].message();
  EXPECT_TRUE(absl::StrContains(results[0].message(), "link down"))
      << results[0].message();
  EXPECT_TRUE(absl::StrContains(results[0].message(),
                                absl::StrCat("touching slot ", to_slot)))
      << results[0].message();
  EXPECT_EQ(cache_->DebugDump(), dump);
  ExpectConsistent(/*live_slots=*/2);

  device_->ClearFaults();
  const std::vector<v1::OperationResult> again = Run({CopyOp("r", 0, 1)});
  EXPECT_EQ(again[0].code(), 0) << again[0].message();
  EXPECT_GT(again[0].copy().bytes(), 0u);
}

TEST_P(DeviceFaultTest, AForkCheckpointAndItsResumeRunNoCopy) {
  // Fork transfer moves no bytes in the daemon: the forward reads the
  // checkpoint slot (fork_src) and writes the fresh one. A device whose
  // every copy fails changes nothing for it.
  device_->FailAllCopies();
  std::vector<v1::OperationResult> results =
      Run({AdmitOp("a", 1, {55}), CheckpointOp("a", 1, 55)});
  ASSERT_EQ(results[1].code(), 0) << results[1].message();
  ASSERT_TRUE(results[1].checkpoint().kept());
  const int64_t checkpoint = results[1].checkpoint().fork_src();
  // Its reader's two passes go by; the checkpoint is free and filed.
  Run({ReleaseOp("a"), BeginPassOp()});
  Run({BeginPassOp()});
  results = Run({AdmitOp("b", 1, {55}, 1)});
  ASSERT_EQ(results[0].code(), 0) << results[0].message();
  EXPECT_EQ(results[0].admit().fork_src(), checkpoint);
  EXPECT_EQ(results[0].admit().blocks_resumed(), 1);
  EXPECT_EQ(device_->counts().copies, 0);
  ExpectConsistent(/*live_slots=*/2);  // b's slot and the pinned source
}

TEST_P(DeviceFaultTest, AShrinkWhoseRelocationFailsDropsTheMovedCheckpoint) {
  // r0 at 0, r1 at 1, r5 at 5; checkpoint 606 (of r0) at 6; 2, 3, 4, 7
  // vacant.
  ASSERT_EQ(Run({AdmitOp("r0", 1), AdmitOp("r1", 1), AdmitOp("f2", 1),
                 AdmitOp("f3", 1), AdmitOp("f4", 1), AdmitOp("r5", 1)})[5]
                .admit()
                .slots(0),
            5);
  const std::vector<v1::OperationResult> snap =
      Run({SnapshotOp("r0", kBlock, 606)});
  ASSERT_EQ(snap[0].snapshot().slot(), 6);
  Run({ReleaseOp("f2"), ReleaseOp("f3"), ReleaseOp("f4")});
  const int64_t kept = Stats().checkpoints_kept();
  // Shrinking to 4: 7 goes, the checkpoint at 6 moves to 2 in a batch that
  // fails, which ends the resize there (r5's live slot has not moved: it
  // waits for its session's begin_pass).
  device_->FailAllCopies(absl::InternalError("copy engine fault"));
  v1::ResizeResponse resized;
  absl::Status status = Resize(4, &resized);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "relocation")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "copy engine fault"))
      << status;
  EXPECT_TRUE(absl::StrContains(status.message(),
                                "1 checkpoints moved in it were dropped"))
      << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "0 live slots")) << status;
  EXPECT_EQ(resized.num_slots(), 6);
  EXPECT_EQ(resized.relocated(), 1);
  // The checkpoint's bytes never reached slot 2: nobody may resume from it.
  const std::vector<v1::OperationResult> results =
      Run({LookupOp(606), ResumableHitOp(606)});
  EXPECT_EQ(results[0].lookup().slot(), -1);
  EXPECT_EQ(results[1].resumable_hit().blocks(), 0);
  EXPECT_EQ(Stats().checkpoints_kept(), kept);

  // Again to 4: r5 (the top) moves to 2 in its session's begin_pass, in a
  // batch that fails too. The pool's decision stands and r5 is told.
  device_->ClearFaults();
  v1::ResizeRequest request;
  request.set_target_slots(4);
  status = absl::UnknownError("pending");
  cache_->Resize(request, [&](absl::Status st, const v1::ResizeResponse& r) {
    status = std::move(st);
    resized = r;
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kUnknown) << status;
  device_->FailAllCopies(absl::InternalError("copy engine fault"));
  const std::vector<v1::OperationResult> pass = Run({BeginPassOp()});
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "1 live slots")) << status;
  EXPECT_EQ(resized.num_slots(), 4);
  ASSERT_EQ(pass[0].begin_pass().moves_size(), 1);
  EXPECT_EQ(pass[0].begin_pass().moves(0).request_id(), "r5");
  EXPECT_EQ(pass[0].begin_pass().moves(0).from_slot(), 5);
  EXPECT_EQ(pass[0].begin_pass().moves(0).to_slot(), 2);
  ExpectConsistent(/*live_slots=*/3);
  EXPECT_EQ(device_->num_slots(), 4);
}

TEST_P(DeviceFaultTest, ACheckpointMovedTwiceAfterAFailedBatchStaysUnfiled) {
  // r0 at 0, r1 at 1, checkpoint 202 at 2 and 707 at 7, 3..6 vacant.
  // Shrinking to 3: 707 moves 7 -> 3 (batch one, which fails); when 3
  // retires, 707 moves on to 2, spending 202 (nothing vacant below), and
  // that flushes batch one. 707 must not stay filed at 2: its bytes never
  // left 7.
  ASSERT_EQ(Run({AdmitOp("r0", 1), AdmitOp("r1", 1)})[1].code(), 0);
  ASSERT_EQ(Run({SnapshotOp("r0", kBlock, 202)})[0].snapshot().slot(), 2);
  ASSERT_EQ(Run({AdmitOp("f3", 1), AdmitOp("f4", 1), AdmitOp("f5", 1),
                 AdmitOp("f6", 1)})[3]
                .code(),
            0);
  ASSERT_EQ(Run({SnapshotOp("r1", kBlock, 707)})[0].snapshot().slot(), 7);
  Run({ReleaseOp("f3"), ReleaseOp("f4"), ReleaseOp("f5"), ReleaseOp("f6")});
  const v1::GetStatsResponse before = Stats();
  const int64_t copies = device_->counts().copies;
  device_->FailNthCopy(1, absl::InternalError("first batch lost"));
  const absl::Status status = Resize(3);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "first batch lost"))
      << status;
  EXPECT_EQ(device_->counts().copies, copies + 2);  // both batches ran
  const std::vector<v1::OperationResult> results =
      Run({LookupOp(707), LookupOp(202), ResumableHitOp(707)});
  EXPECT_EQ(results[0].lookup().slot(), -1);
  EXPECT_EQ(results[1].lookup().slot(), -1);  // spent to make room
  EXPECT_EQ(results[2].resumable_hit().blocks(), 0);
  const v1::GetStatsResponse after = Stats();
  EXPECT_EQ(after.checkpoints_kept(), before.checkpoints_kept());
  EXPECT_EQ(after.checkpoints_evicted(), before.checkpoints_evicted() + 1);
  ExpectConsistent(/*live_slots=*/2);
}

TEST_P(DeviceFaultTest, AShrinkWhoseMemoryFailedEndsAtOnceShortOfItsTarget) {
  // r0 at 0; a checkpointed (fork) at 3, so 3 is pinned and a lives at 4;
  // checkpoint 707 at 7. Shrinking to 2: 707 moves to 1, 6 and 5 go, then
  // a's live slot waits for its session's begin_pass. The failed batch ends
  // the resize now, as a failure, rather than leaving it to retry on a
  // failing device until its deadline.
  ASSERT_EQ(Run({AdmitOp("r0", 1), AdmitOp("f1", 1), AdmitOp("f2", 1),
                 AdmitOp("a", 1, {55}), CheckpointOp("a", 1, 55)})[4]
                .checkpoint()
                .state_slot(),
            4);
  ASSERT_EQ(Run({AdmitOp("f5", 1), AdmitOp("f6", 1),
                 SnapshotOp("r0", kBlock, 707)})[2]
                .snapshot()
                .slot(),
            7);
  Run({ReleaseOp("f1"), ReleaseOp("f2"), ReleaseOp("f5"), ReleaseOp("f6")});
  device_->FailAllCopies();
  const absl::Status result = Resize(2, nullptr, /*deadline_ms=*/60'000);
  EXPECT_EQ(result.code(), absl::StatusCode::kInternal) << result;
  EXPECT_TRUE(absl::StrContains(result.message(), "resize to 2 slots (now 5)"))
      << result;
  EXPECT_EQ(Run({LookupOp(707)})[0].lookup().slot(), -1);
  // Over: a new resize is not refused as one "already in progress".
  device_->ClearFaults();
  EXPECT_NE(Resize(6).code(), absl::StatusCode::kAborted);
  ExpectConsistent(/*live_slots=*/3);  // r0, a and the pinned 3
}

TEST_P(DeviceFaultTest, AShrinkWhoseCopiesSucceedKeepsTheMovedCheckpoint) {
  // The control for the two above: the same shrink on a working device
  // keeps the checkpoint, filed at its new slot.
  ASSERT_EQ(Run({AdmitOp("r0", 1), AdmitOp("r1", 1), AdmitOp("f2", 1),
                 AdmitOp("f3", 1), AdmitOp("f4", 1), AdmitOp("r5", 1)})[5]
                .code(),
            0);
  ASSERT_EQ(Run({SnapshotOp("r0", kBlock, 606)})[0].snapshot().slot(), 6);
  Run({ReleaseOp("f2"), ReleaseOp("f3"), ReleaseOp("f4")});
  const absl::Status status = Resize(4);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(Run({LookupOp(606)})[0].lookup().slot(), 2);
  ExpectConsistent(/*live_slots=*/3);
}

TEST_P(DeviceFaultTest, AGrowTheMemoryCannotFollowChangesNothing) {
  device_->FailGrowth(absl::ResourceExhaustedError("/dev/shm is full"));
  const std::string dump = cache_->DebugDump();
  v1::ResizeResponse resized;
  const absl::Status status = Resize(12, &resized);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "/dev/shm is full"))
      << status;
  EXPECT_EQ(resized.num_slots(), kSlots);
  EXPECT_EQ(cache_->DebugDump(), dump);
  EXPECT_EQ(device_->num_slots(), kSlots);
  ExpectConsistent(/*live_slots=*/0);
  // Admissions still get exactly the slots there are.
  std::vector<v1::Operation> ops;
  for (int i = 0; i <= kSlots; ++i) ops.push_back(AdmitOp(absl::StrCat(i), 1));
  const std::vector<v1::OperationResult> results = Run(std::move(ops));
  EXPECT_EQ(results[kSlots - 1].code(), 0);
  EXPECT_EQ(results[kSlots].code(),
            static_cast<int>(absl::StatusCode::kResourceExhausted));
}

}  // namespace
}  // namespace statecache
