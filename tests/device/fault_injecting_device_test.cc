// FaultInjectingDevice over a device that records what reaches it: which
// faults fire on which call, what is forwarded and what is not, and that
// faults can be set while other threads copy.
#include "daemon/device/fault_injecting_device.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/device/heap_staging.h"

namespace statecache {
namespace {

// Records every Copy, ReadSlots, WriteSlots and Resize; never fails on its
// own.
class RecordingDevice : public Device {
 public:
  RecordingDevice()
      : layout_(*StateLayout::Create("rec", {{"s", {4}, DType::kF32}}, 1)) {}

  std::string_view backend() const override { return "host"; }
  const StateLayout& layout() const override { return layout_; }
  int64_t num_slots() const override { return num_slots_; }
  int64_t max_slots() const override { return 64; }
  absl::Status Resize(int64_t new_num_slots) override {
    num_slots_ = new_num_slots;
    return absl::OkStatus();
  }
  RegionExport Export() const override { return RegionExport{}; }
  absl::StatusOr<CopyResult> Copy(absl::Span<const SlotPair> pairs) override {
    absl::MutexLock lock(&mu_);
    for (const SlotPair& p : pairs) copied_.push_back(p);
    return CopyResult{pairs.size() * 16, 1, absl::ZeroDuration()};
  }
  absl::StatusOr<std::unique_ptr<HostStaging>> AllocateStaging(
      uint64_t bytes) override {
    return std::make_unique<HeapStaging>(bytes);
  }
  absl::StatusOr<CopyResult> ReadSlots(
      HostStaging& staging, absl::Span<const SlotImage> images) override {
    absl::MutexLock lock(&mu_);
    for (const SlotImage& image : images) read_.push_back(image.slot);
    return CopyResult{images.size() * 16, 1, absl::ZeroDuration()};
  }
  absl::StatusOr<CopyResult> WriteSlots(
      const HostStaging& staging, absl::Span<const SlotImage> images) override {
    absl::MutexLock lock(&mu_);
    for (const SlotImage& image : images) written_.push_back(image.slot);
    return CopyResult{images.size() * 16, 1, absl::ZeroDuration()};
  }
  uint64_t CommittedBytes() const override { return 0; }

  std::vector<SlotPair> copied() const {
    absl::MutexLock lock(&mu_);
    return copied_;
  }
  // The slots of every image ReadSlots / WriteSlots was given.
  std::vector<int64_t> read() const {
    absl::MutexLock lock(&mu_);
    return read_;
  }
  std::vector<int64_t> written() const {
    absl::MutexLock lock(&mu_);
    return written_;
  }

 private:
  StateLayout layout_;
  int64_t num_slots_ = 8;
  mutable absl::Mutex mu_;
  std::vector<SlotPair> copied_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> read_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> written_ ABSL_GUARDED_BY(mu_);
};

class FaultInjectingDeviceTest : public ::testing::Test {
 protected:
  absl::Status CopyOne(int64_t src, int64_t dst) {
    const SlotPair pair{src, dst};
    return device_.Copy({&pair, 1}).status();
  }

  std::shared_ptr<RecordingDevice> base_ = std::make_shared<RecordingDevice>();
  FaultInjectingDevice device_{base_};
};

TEST_F(FaultInjectingDeviceTest, ForwardsEverythingWithNoFault) {
  EXPECT_TRUE(CopyOne(0, 1).ok());
  EXPECT_TRUE(device_.Resize(12).ok());
  EXPECT_EQ(device_.num_slots(), 12);
  EXPECT_EQ(device_.max_slots(), 64);
  EXPECT_EQ(device_.backend(), "host");
  EXPECT_EQ(&device_.layout(), &base_->layout());
  EXPECT_EQ(base_->copied(), (std::vector<SlotPair>{{0, 1}}));
  const FaultInjectingDevice::Counts counts = device_.counts();
  EXPECT_EQ(counts.copies, 1);
  EXPECT_EQ(counts.copies_failed, 0);
  EXPECT_EQ(counts.resizes, 1);
  EXPECT_EQ(counts.resizes_failed, 0);
}

TEST_F(FaultInjectingDeviceTest, TheNthCopyFailsOnceAndIsNotForwarded) {
  device_.FailNthCopy(2, absl::DataLossError("bit flip"));
  EXPECT_TRUE(CopyOne(0, 1).ok());
  const absl::Status failed = CopyOne(2, 3);
  EXPECT_EQ(failed.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(failed.message(), "copy #2")) << failed;
  EXPECT_TRUE(absl::StrContains(failed.message(), "2 -> 3")) << failed;
  EXPECT_TRUE(absl::StrContains(failed.message(), "bit flip")) << failed;
  EXPECT_TRUE(absl::StrContains(failed.message(), "injected")) << failed;
  EXPECT_TRUE(CopyOne(4, 5).ok());  // one-shot
  EXPECT_EQ(base_->copied(), (std::vector<SlotPair>{{0, 1}, {4, 5}}));
  EXPECT_EQ(device_.counts().copies_failed, 1);
}

TEST_F(FaultInjectingDeviceTest, AForwardedFaultCopiesAndStillFails) {
  device_.FailNthCopy(1, absl::InternalError("late error"), /*forward=*/true);
  EXPECT_EQ(CopyOne(0, 1).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(base_->copied(), (std::vector<SlotPair>{{0, 1}}));
}

TEST_F(FaultInjectingDeviceTest, CopiesTouchingASlotFailUntilCleared) {
  device_.FailCopiesTouching(3);
  const SlotPair batch[] = {{0, 1}, {5, 3}};
  const absl::Status failed = device_.Copy(batch).status();
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StrContains(failed.message(), "touching slot 3")) << failed;
  EXPECT_EQ(CopyOne(3, 0).code(), absl::StatusCode::kInternal);  // a read
  EXPECT_TRUE(CopyOne(0, 1).ok());
  EXPECT_EQ(base_->copied(), (std::vector<SlotPair>{{0, 1}}));  // nothing else
  device_.ClearFaults();
  EXPECT_TRUE(CopyOne(3, 0).ok());
}

TEST_F(FaultInjectingDeviceTest, AllCopiesFailUntilCleared) {
  device_.FailAllCopies(absl::UnavailableError("gone"));
  EXPECT_EQ(CopyOne(0, 1).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(CopyOne(1, 2).code(), absl::StatusCode::kUnavailable);
  device_.ClearFaults();
  EXPECT_TRUE(CopyOne(1, 2).ok());
  EXPECT_EQ(device_.counts().copies_failed, 2);
}

TEST_F(FaultInjectingDeviceTest, GrowthFailsAndLeavesTheRegionAsItWas) {
  device_.FailGrowth();
  const absl::Status failed = device_.Resize(16);
  EXPECT_EQ(failed.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(failed.message(), "growing to 16 slots"))
      << failed;
  EXPECT_EQ(device_.num_slots(), 8);
  EXPECT_TRUE(device_.Resize(4).ok());  // shrinking allocates nothing
  EXPECT_EQ(device_.num_slots(), 4);
  device_.ClearFaults();
  EXPECT_TRUE(device_.Resize(16).ok());
}

TEST_F(FaultInjectingDeviceTest, TheNthResizeFailsOnce) {
  device_.FailNthResize(1, absl::InternalError("punch hole"));
  EXPECT_EQ(device_.Resize(4).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(device_.num_slots(), 8);
  EXPECT_TRUE(device_.Resize(4).ok());
  EXPECT_EQ(device_.counts().resizes_failed, 1);
}

// ReadSlots and WriteSlots of one image each, at offset 0 of `staging`.
class FaultInjectingImagesTest : public FaultInjectingDeviceTest {
 protected:
  absl::Status ReadOne(int64_t slot) {
    const SlotImage image{slot, 0};
    return device_.ReadSlots(*staging_, {&image, 1}).status();
  }
  absl::Status WriteOne(int64_t slot) {
    const SlotImage image{slot, 0};
    return device_.WriteSlots(*staging_, {&image, 1}).status();
  }

  std::unique_ptr<HostStaging> staging_ = *device_.AllocateStaging(64);
};

TEST_F(FaultInjectingImagesTest, ForwardsReadsAndWritesAndCountsThemAsCopies) {
  EXPECT_EQ(staging_->size(), 64u);
  const SlotImage images[] = {{2, 0}, {3, 16}};
  absl::StatusOr<CopyResult> read = device_.ReadSlots(*staging_, images);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->bytes, 32u);  // the wrapped device's result
  EXPECT_TRUE(WriteOne(5).ok());
  EXPECT_TRUE(CopyOne(0, 1).ok());
  EXPECT_EQ(base_->read(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(base_->written(), (std::vector<int64_t>{5}));
  const FaultInjectingDevice::Counts counts = device_.counts();
  EXPECT_EQ(counts.copies, 3);
  EXPECT_EQ(counts.copies_failed, 0);
}

TEST_F(FaultInjectingImagesTest, TheNthCopyCountsReadsAndWrites) {
  device_.FailNthCopy(3, absl::DataLossError("bit flip"));
  EXPECT_TRUE(CopyOne(0, 1).ok());
  EXPECT_TRUE(ReadOne(2).ok());
  const absl::Status failed = WriteOne(4);
  EXPECT_EQ(failed.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(failed.message(), "copy #3")) << failed;
  EXPECT_TRUE(absl::StrContains(failed.message(),
                                "write of 1 slot, first slot 4 at offset 0"))
      << failed;
  EXPECT_TRUE(absl::StrContains(failed.message(), "injected")) << failed;
  EXPECT_TRUE(base_->written().empty());  // not forwarded
  EXPECT_TRUE(WriteOne(4).ok());          // one-shot
  EXPECT_EQ(base_->written(), (std::vector<int64_t>{4}));

  device_.FailNthCopy(1);
  EXPECT_EQ(ReadOne(6).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(base_->read(), (std::vector<int64_t>{2}));
  EXPECT_EQ(device_.counts().copies, 5);
  EXPECT_EQ(device_.counts().copies_failed, 2);
}

TEST_F(FaultInjectingImagesTest, AForwardedFaultWritesAndStillFails) {
  device_.FailNthCopy(1, absl::InternalError("late error"), /*forward=*/true);
  EXPECT_EQ(WriteOne(3).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(base_->written(), (std::vector<int64_t>{3}));
}

TEST_F(FaultInjectingImagesTest, ImagesOfAFailingSlotFailUntilCleared) {
  device_.FailCopiesTouching(3);
  const SlotImage images[] = {{1, 0}, {3, 16}};
  const absl::Status failed = device_.ReadSlots(*staging_, images).status();
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StrContains(failed.message(), "touching slot 3")) << failed;
  EXPECT_TRUE(absl::StrContains(failed.message(), "read of 2 slots")) << failed;
  EXPECT_EQ(WriteOne(3).code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(ReadOne(1).ok());
  EXPECT_TRUE(WriteOne(2).ok());
  EXPECT_EQ(base_->read(), (std::vector<int64_t>{1}));
  EXPECT_EQ(base_->written(), (std::vector<int64_t>{2}));
  device_.ClearFaults();
  EXPECT_TRUE(WriteOne(3).ok());
  EXPECT_EQ(device_.counts().copies_failed, 2);
}

TEST_F(FaultInjectingImagesTest, AllCopiesFailReadsAndWrites) {
  device_.FailAllCopies(absl::UnavailableError("gone"));
  EXPECT_EQ(ReadOne(0).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(WriteOne(0).code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(base_->read().empty());
  EXPECT_TRUE(base_->written().empty());
  device_.ClearFaults();
  EXPECT_TRUE(ReadOne(0).ok());
}

TEST_F(FaultInjectingDeviceTest, FaultsMaySetWhileOtherThreadsCopy) {
  // Faults set, cleared and counted concurrently with copies (the
  // contract's thread safety; a data race here is TSan's to name).
  std::atomic<bool> stop{false};
  std::atomic<int64_t> failures{0};
  std::vector<std::thread> copiers;
  for (int t = 0; t < 3; ++t) {
    copiers.emplace_back([&, t] {
      while (!stop.load()) {
        if (!CopyOne(t, t + 4).ok()) failures.fetch_add(1);
      }
    });
  }
  for (int i = 0; i < 200; ++i) {
    device_.FailCopiesTouching(i % 8);
    device_.FailNthCopy(1 + i % 3);
    device_.ClearFaults();
  }
  stop.store(true);
  for (std::thread& t : copiers) t.join();
  const FaultInjectingDevice::Counts counts = device_.counts();
  EXPECT_EQ(counts.copies_failed, failures.load());
  EXPECT_EQ(static_cast<int64_t>(base_->copied().size()),
            counts.copies - counts.copies_failed);
}

}  // namespace
}  // namespace statecache
