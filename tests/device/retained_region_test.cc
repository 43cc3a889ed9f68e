// Regions kept for a warm restart: their names (FormatRetainedShmName), which
// no stale-object cleanup removes; a HostDevice with retain=true that leaves
// its object behind only once KeepOnExit(true) was called; and
// RetainedRegion, which opens only a retained name of its prefix whose owner
// lock is free, and reads back exactly the images the HostDevice's slots
// held (slot-major and layer-major), never a byte outside its mapping.
#include "daemon/device/retained_region.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/checksum.h"
#include "daemon/device/host_device.h"
#include "daemon/device/shm_name.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/device/host_test_util.h"
#include "tests/device/pattern.h"

namespace statecache {

namespace {

using ::testing::Contains;
using testing::DeadPid;
using testing::MakeShmObject;
using ::testing::Not;
using testing::ShmExists;
using ::testing::UnorderedElementsAre;

uint64_t NextEpoch() {
  static uint64_t epoch = 5000;
  return ++epoch;
}

// Unlinks a shared-memory object at the end of a test, whatever happened.
struct Unlinker {
  std::string name;
  ~Unlinker() {
    if (!name.empty()) shm_unlink(name.c_str());
  }
};

TEST(RetainedShmNameTest, FormatsAndRecognisesRetainedNames) {
  const ShmOwner owner = {4321, 8765};
  const std::string kept =
      FormatRetainedShmName("statecache", 9, owner, 0xab12);
  EXPECT_EQ(kept,
            FormatShmName("statecache", 9, owner) + "-k000000000000ab12-kept");
  EXPECT_EQ(kept, "/statecache-9-4321-8765-k000000000000ab12-kept");
  EXPECT_TRUE(IsRetainedShmName(kept, "statecache"));
  EXPECT_TRUE(IsRetainedShmName(kept.substr(1), "statecache"));
  std::optional<RetainedShmName> parsed =
      ParseRetainedShmName(kept, "statecache");
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->name.epoch, 9u);
  EXPECT_EQ(parsed->name.owner, owner);
  EXPECT_EQ(parsed->keeper, std::optional<uint64_t>(0xab12));
  // The form daemons made before keeper keys still parses, keeper unknown.
  parsed = ParseRetainedShmName("/statecache-9-4321-8765-kept", "statecache");
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->name.owner, owner);
  EXPECT_FALSE(parsed->keeper.has_value());
  // Only the name as formatted, of this prefix.
  for (const std::string& bad : std::vector<std::string>{
           FormatShmName("statecache", 9, owner),  // not retained
           "/statecache-9-4321-8765-kept-kept", "/statecache-9-4321-kept",
           "/statecache-9-4321-8765-kep", "/statecache-9-4321-8765kept",
           "/statecache-x-4321-8765-kept", "/statecache-9-0-8765-kept", "-kept",
           "kept", "", "/other-9-4321-8765-kept",
           "/statecachex-9-4321-8765-kept",
           "/statecache-9-4321-8765-k00000000000000ab-k000000000000ab12-kept",
           "/statecache-9-4321-8765-k000000000000AB12-kept",
           "/statecache-9-4321-8765-k00000000000ab12-kept",
           "/statecache-9-4321-8765-k-kept", "/statecache-9-4321-k12-kept",
           "/statecache-9-4321-8765-x000000000000ab12-kept"}) {
    EXPECT_FALSE(IsRetainedShmName(bad, "statecache")) << bad;
  }
  EXPECT_FALSE(IsRetainedShmName(kept, "other"));
  EXPECT_FALSE(IsRetainedShmName("/bad-prefix-9-4321-8765-kept", "bad-prefix"));
  // A retained name is not a daemon's live name: stale cleanup, which acts
  // only on names ParseShmName accepts, never sees it.
  EXPECT_FALSE(ParseShmName(kept, "statecache").has_value());
  EXPECT_FALSE(ParseShmName(kept.substr(1), "statecache").has_value());
  // Round trip over a few owners and epochs.
  for (uint64_t epoch : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}}) {
    for (const ShmOwner& o : {ShmOwner{1, 0}, ShmOwner{INT32_MAX, ~uint64_t{0}},
                              CurrentShmOwner()}) {
      const std::string name = FormatRetainedShmName("p_1.x", epoch, o);
      EXPECT_TRUE(IsRetainedShmName(name, "p_1.x")) << name;
      EXPECT_FALSE(ParseShmName(name, "p_1.x").has_value()) << name;
      const std::string plain = FormatShmName("p_1.x", epoch, o);
      EXPECT_FALSE(IsRetainedShmName(plain, "p_1.x")) << plain;
    }
  }
}

TEST(RetainedShmNameTest, StaleCleanupLeavesARetainedObjectOfADeadOwner) {
  const std::string prefix = absl::StrCat("scretained", getpid());
  const ShmOwner dead = {DeadPid(), 5};
  const std::string kept = FormatRetainedShmName(prefix, 1, dead).substr(1);
  const std::string stale = FormatShmName(prefix, 2, dead).substr(1);
  MakeShmObject(kept);
  MakeShmObject(stale);
  Unlinker cleanup{"/" + kept};
  absl::StatusOr<std::vector<std::string>> removed = CleanupStaleShm(prefix);
  ASSERT_TRUE(removed.ok()) << removed.status();
  // The cleanup ran (the plain stale object went) and left the kept one.
  EXPECT_THAT(*removed, UnorderedElementsAre(stale));
  EXPECT_THAT(*removed, Not(Contains(kept)));
  EXPECT_FALSE(ShmExists(stale));
  EXPECT_TRUE(ShmExists(kept));
  // Again: still there.
  removed = CleanupStaleShm(prefix);
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(removed->empty());
  EXPECT_TRUE(ShmExists(kept));
}

// A SIGKILL during the shutdown save left -kept regions that no
// later start removed. A daemon reclaims those of its own keeper whose
// maker is dead, and nothing else.
TEST(RetainedShmNameTest, ReclaimTakesOnlyThisKeepersOrphans) {
  const std::string prefix = absl::StrCat("screclaim", getpid());
  const uint64_t mine = ShmKeeperKey("unix:/run/a.sock");
  const uint64_t theirs = ShmKeeperKey("unix:/run/b.sock");
  ASSERT_NE(mine, theirs);
  const ShmOwner dead = {DeadPid(), 5};
  const auto bare = [&](uint64_t epoch, const ShmOwner& owner,
                        uint64_t keeper) {
    return FormatRetainedShmName(prefix, epoch, owner, keeper).substr(1);
  };
  const std::string orphan = bare(1, dead, mine);
  const std::string another_daemons = bare(2, dead, theirs);
  const std::string makers_alive = bare(3, CurrentShmOwner(), mine);
  const std::string spared = bare(4, dead, mine);
  const std::string before_keepers =
      FormatShmName(prefix, 5, dead).substr(1) + "-kept";
  const std::string locked = bare(6, dead, mine);
  std::vector<std::unique_ptr<Unlinker>> cleanup;
  for (const std::string& name : {orphan, another_daemons, makers_alive, spared,
                                  before_keepers, locked}) {
    MakeShmObject(name);
    cleanup.push_back(std::make_unique<Unlinker>());
    cleanup.back()->name = "/" + name;
  }
  // A live holder of the owner lock, whatever the name says.
  const int lock_fd = shm_open(("/" + locked).c_str(), O_RDONLY, 0);
  ASSERT_GE(lock_fd, 0);
  ASSERT_EQ(flock(lock_fd, LOCK_EX | LOCK_NB), 0);

  absl::StatusOr<std::vector<std::string>> removed =
      ReclaimOrphanedRetainedShm(prefix, mine, {"/" + spared});
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed, UnorderedElementsAre(orphan));
  EXPECT_FALSE(ShmExists(orphan));
  for (const std::string& name :
       {another_daemons, makers_alive, spared, before_keepers, locked}) {
    EXPECT_TRUE(ShmExists(name)) << name;
  }
  close(lock_fd);
  if (geteuid() == 0) {
    // Another user's object is never the daemon's to remove.
    const std::string foreign = bare(7, dead, mine);
    MakeShmObject(foreign);
    cleanup.push_back(std::make_unique<Unlinker>());
    cleanup.back()->name = "/" + foreign;
    ASSERT_EQ(chown(("/dev/shm/" + foreign).c_str(), 65534, 65534), 0);
    removed = ReclaimOrphanedRetainedShm(prefix, mine, {});
    ASSERT_TRUE(removed.ok()) << removed.status();
    // Unlocked and no longer spared, those two go; the foreign one stays.
    EXPECT_THAT(*removed, UnorderedElementsAre(locked, spared));
    EXPECT_TRUE(ShmExists(foreign));
  }
}

// Padding in two of three pieces (120 -> 128, 14 -> 16), three layers.
StateLayout ImageLayout() {
  return *StateLayout::Create("kept",
                              {{"conv", {3, 40}, DType::kBF16},
                               {"ssm", {2, 5, 3}, DType::kF32},
                               {"gate", {7}, DType::kBF16}},
                              3);
}

class RetainedRegionTest : public ::testing::TestWithParam<Arrangement> {
 protected:
  static void FillSlots(const HostDevice& device, uint64_t seed) {
    testing::FillSlots(device, seed);
  }
  static std::vector<char> Image(const StateLayout& l, uint64_t seed,
                                 int64_t slot) {
    return testing::Image(l, seed, slot);
  }
  static constexpr char kPrefix[] = "statecache_kept";

  std::unique_ptr<HostDevice> MakeDevice(int64_t num_slots, int64_t max_slots,
                                         bool retain) {
    HostDeviceOptions options;
    options.layout = ImageLayout().WithArrangement(GetParam());
    options.num_slots = num_slots;
    options.max_slots = max_slots;
    options.epoch = NextEpoch();
    options.prefix = kPrefix;
    options.retain = retain;
    absl::StatusOr<std::unique_ptr<HostDevice>> device =
        HostDevice::Create(options);
    EXPECT_TRUE(device.ok()) << device.status();
    if (!device.ok()) return nullptr;
    // Whatever the test does, the object goes at the end.
    unlink_.push_back(std::make_unique<Unlinker>());
    unlink_.back()->name = (*device)->shm_name();
    return std::move(*device);
  }

  std::vector<std::unique_ptr<Unlinker>> unlink_;
};

TEST_P(RetainedRegionTest, KeepOnExitDecidesWhetherTheObjectOutlivesIt) {
  {
    // retain=true, KeepOnExit(true): left behind.
    std::unique_ptr<HostDevice> device = MakeDevice(4, 8, /*retain=*/true);
    ASSERT_NE(device, nullptr);
    const std::string name = device->shm_name();
    EXPECT_TRUE(IsRetainedShmName(name, kPrefix)) << name;
    EXPECT_EQ(device->Export().handle, name);
    device->KeepOnExit(true);
    device.reset();
    EXPECT_TRUE(ShmExists(name));
  }
  {
    // retain=true without KeepOnExit: unlinked (a daemon that never got to
    // name it in its state directory leaks nothing).
    std::unique_ptr<HostDevice> device = MakeDevice(4, 8, true);
    ASSERT_NE(device, nullptr);
    const std::string name = device->shm_name();
    ASSERT_TRUE(ShmExists(name));
    device.reset();
    EXPECT_FALSE(ShmExists(name));
  }
  {
    // KeepOnExit(true) then (false): a clean shutdown lets it go.
    std::unique_ptr<HostDevice> device = MakeDevice(4, 8, true);
    ASSERT_NE(device, nullptr);
    const std::string name = device->shm_name();
    device->KeepOnExit(true);
    device->KeepOnExit(false);
    device.reset();
    EXPECT_FALSE(ShmExists(name));
  }
  {
    // retain=false: an ordinary name, unlinked.
    std::unique_ptr<HostDevice> device = MakeDevice(4, 8, false);
    ASSERT_NE(device, nullptr);
    const std::string name = device->shm_name();
    EXPECT_FALSE(IsRetainedShmName(name, kPrefix));
    EXPECT_TRUE(ParseShmName(name, kPrefix).has_value());
    device.reset();
    EXPECT_FALSE(ShmExists(name));
  }
}

TEST_P(RetainedRegionTest, OpensOnlyARetainedNameWhoseOwnerIsGone) {
  std::unique_ptr<HostDevice> device = MakeDevice(4, 8, /*retain=*/true);
  ASSERT_NE(device, nullptr);
  const std::string name = device->shm_name();
  const uint64_t bytes = device->Export().region_bytes;

  // Not a retained name of this prefix: refused before anything is opened.
  const std::string plain =
      FormatShmName(kPrefix, NextEpoch(), CurrentShmOwner());
  for (const std::string& bad :
       {plain, name.substr(1), name + "x", std::string("/etc/passwd"),
        std::string("/../dev/shm") + name, std::string("")}) {
    EXPECT_EQ(RetainedRegion::Open(bad, kPrefix, 0).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_EQ(RetainedRegion::Open(name, "statecache_other", 0).status().code(),
            absl::StatusCode::kInvalidArgument);

  // The live HostDevice holds the owner lock.
  absl::StatusOr<RetainedRegion> held =
      RetainedRegion::Open(name, kPrefix, bytes);
  EXPECT_EQ(held.status().code(), absl::StatusCode::kFailedPrecondition)
      << held.status();

  device->KeepOnExit(true);
  device.reset();
  ASSERT_TRUE(ShmExists(name));
  // Shorter than the index said: refused.
  EXPECT_EQ(RetainedRegion::Open(name, kPrefix, bytes + 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  {
    absl::StatusOr<RetainedRegion> region =
        RetainedRegion::Open(name, kPrefix, bytes);
    ASSERT_TRUE(region.ok()) << region.status();
    EXPECT_EQ(region->handle(), name);
    // One opener at a time: the first holds the lock now, and a move
    // carries it.
    EXPECT_EQ(RetainedRegion::Open(name, kPrefix, bytes).status().code(),
              absl::StatusCode::kFailedPrecondition);
    RetainedRegion moved = std::move(*region);
    EXPECT_EQ(moved.handle(), name);
    EXPECT_EQ(RetainedRegion::Open(name, kPrefix, bytes).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
  // Closed without Remove: the object stays, the lock goes.
  EXPECT_TRUE(ShmExists(name));
  absl::StatusOr<RetainedRegion> again =
      RetainedRegion::Open(name, kPrefix, bytes);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(again->Remove().ok());
  EXPECT_FALSE(ShmExists(name));
  EXPECT_TRUE(again->Remove().ok());  // already gone: fine
  // Gone: NOT_FOUND.
  EXPECT_EQ(RetainedRegion::Open(name, kPrefix, 0).status().code(),
            absl::StatusCode::kNotFound);
}

// A root daemon restored from a -kept region another user made,
// served its bytes, then deleted it. Only the daemon's user's region, whose
// maker is dead, is trusted; a refused one is left as it is.
TEST_P(RetainedRegionTest, TrustsOnlyItsOwnUsersRegionOfADeadMaker) {
  // A prefix of this process's: the test's other arrangement runs at the
  // same time in another process, with the same epochs.
  const std::string prefix = absl::StrCat("sctrust", getpid());
  // Made by a process that is running (pid 1, at its real start time).
  const ShmOwner init = {1, 0};
  ASSERT_TRUE(ShmOwnerAlive(init));
  const std::string live_maker =
      FormatRetainedShmName(prefix, NextEpoch(), init, 7);
  MakeShmObject(live_maker.substr(1));
  Unlinker unlink_live{live_maker};
  absl::StatusOr<RetainedRegion> opened =
      RetainedRegion::Open(live_maker, prefix, 0);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kFailedPrecondition)
      << opened.status();
  EXPECT_TRUE(ShmExists(live_maker));

  const ShmOwner dead = {DeadPid(), 5};
  const std::string kept = FormatRetainedShmName(prefix, NextEpoch(), dead, 7);
  MakeShmObject(kept.substr(1));
  Unlinker unlink_kept{kept};
  ASSERT_TRUE(RetainedRegion::Open(kept, prefix, 0).ok());
  // Writable by anyone: refused.
  ASSERT_EQ(chmod(("/dev/shm" + kept).c_str(), 0666), 0);
  opened = RetainedRegion::Open(kept, prefix, 0);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kPermissionDenied)
      << opened.status();
  ASSERT_EQ(chmod(("/dev/shm" + kept).c_str(), 0660), 0);
  if (geteuid() != 0) return;  // giving it to another user needs root
  ASSERT_EQ(chown(("/dev/shm" + kept).c_str(), 65534, 65534), 0);
  opened = RetainedRegion::Open(kept, prefix, 0);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kPermissionDenied)
      << opened.status();
  EXPECT_TRUE(absl::StrContains(opened.status().message(), "uid 65534"))
      << opened.status();
  EXPECT_TRUE(ShmExists(kept));
}

TEST_P(RetainedRegionTest, ReadsTheImagesTheDevicesSlotsHeld) {
  const int64_t kSlots = 6, kMax = 10;
  std::unique_ptr<HostDevice> device = MakeDevice(kSlots, kMax, true);
  ASSERT_NE(device, nullptr);
  FillSlots(*device, 17);
  const RegionExport exported = device->Export();
  const StateLayout layout = device->layout();
  const std::string name = device->shm_name();
  const int64_t capacity = exported.capacity_slots;
  if (GetParam() == Arrangement::kLayerMajor) {
    ASSERT_EQ(capacity, kMax);  // laid out once for max_slots
  } else {
    ASSERT_EQ(capacity, kSlots);
  }
  // What ReadSlots into staging says, for comparison with the region read
  // after the device is gone.
  const uint64_t b = layout.bytes_per_slot();
  const std::vector<int64_t> slots = {5, 0, 3, 3, 1};
  absl::StatusOr<std::unique_ptr<HostStaging>> staging =
      device->AllocateStaging(slots.size() * b);
  ASSERT_TRUE(staging.ok());
  std::vector<SlotImage> images;
  for (int64_t slot : slots) images.push_back({slot, images.size() * b});
  ASSERT_TRUE(device->ReadSlots(**staging, images).ok());
  const std::vector<char> from_device((*staging)->data(),
                                      (*staging)->data() + slots.size() * b);
  device->KeepOnExit(true);
  device.reset();

  absl::StatusOr<RetainedRegion> region =
      RetainedRegion::Open(name, kPrefix, exported.region_bytes);
  ASSERT_TRUE(region.ok()) << region.status();
  std::vector<char> out(slots.size() * b, 0);
  ASSERT_TRUE(
      region->ReadImages(layout, capacity, slots, absl::MakeSpan(out)).ok());
  EXPECT_TRUE(out == from_device);
  for (size_t k = 0; k < slots.size(); ++k) {
    const std::vector<char> want = Image(layout, 17, slots[k]);
    EXPECT_EQ(std::memcmp(out.data() + k * b, want.data(), b), 0)
        << "image " << k << " (slot " << slots[k] << ")";
  }
  // Slots are told apart.
  EXPECT_NE(std::memcmp(out.data(), out.data() + b, b), 0);

  // Refused reads leave `out` as it was.
  std::vector<char> untouched(2 * b, '\x5a');
  const std::vector<char> before = untouched;
  struct Case {
    const char* what;
    int64_t capacity;
    std::vector<int64_t> slots;
  };
  const std::vector<Case> cases = {
      {"a slot past the capacity", capacity, {0, capacity}},
      {"a negative slot", capacity, {-1}},
      // A capacity the mapping does not hold: slot-major, the slot's bytes
      // lie past the end; layer-major, every layer's block moves out.
      {"a capacity past the mapping", capacity * 4, {0, capacity * 4 - 1}},
  };
  for (const Case& c : cases) {
    const absl::Status st = region->ReadImages(layout, c.capacity, c.slots,
                                               absl::MakeSpan(untouched));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument)
        << c.what << ": " << st;
    EXPECT_TRUE(untouched == before) << c.what;
  }
  // Too little room in `out` for the images asked.
  std::vector<char> small(b, 0);
  EXPECT_FALSE(
      region->ReadImages(layout, capacity, {0, 1}, absl::MakeSpan(small)).ok());

  // The mapping outlives Remove.
  ASSERT_TRUE(region->Remove().ok());
  EXPECT_FALSE(ShmExists(name));
  std::vector<char> after(b, 0);
  const int64_t one[] = {3};
  ASSERT_TRUE(
      region->ReadImages(layout, capacity, one, absl::MakeSpan(after)).ok());
  EXPECT_TRUE(after == Image(layout, 17, 3));
}

// The capacity the index names decides where a layer-major region's pieces
// are (every (layer, tensor) block is capacity slots long); a slot-major
// region's do not move with it.
TEST_P(RetainedRegionTest, OnlyALayerMajorReadDependsOnTheCapacity) {
  std::unique_ptr<HostDevice> device = MakeDevice(4, 8, true);
  ASSERT_NE(device, nullptr);
  FillSlots(*device, 23);
  const RegionExport exported = device->Export();
  const StateLayout layout = device->layout();
  const std::string name = device->shm_name();
  device->KeepOnExit(true);
  device.reset();
  absl::StatusOr<RetainedRegion> region =
      RetainedRegion::Open(name, kPrefix, exported.region_bytes);
  ASSERT_TRUE(region.ok()) << region.status();
  // Slot 0 at capacity 16: layer-major, its later layers' pieces lie past
  // the 8-slot object; slot-major, it is where it always is.
  std::vector<char> out(layout.bytes_per_slot(), '\x11');
  const std::vector<char> before = out;
  const int64_t zero[] = {0};
  const absl::Status st =
      region->ReadImages(layout, 16, zero, absl::MakeSpan(out));
  if (GetParam() == Arrangement::kLayerMajor) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_TRUE(out == before);
  } else {
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_TRUE(out == Image(layout, 23, 0));
  }
  ASSERT_TRUE(region
                  ->ReadImages(layout, exported.capacity_slots, zero,
                               absl::MakeSpan(out))
                  .ok());
  EXPECT_TRUE(out == Image(layout, 23, 0));
}

INSTANTIATE_TEST_SUITE_P(Arrangements, RetainedRegionTest,
                         ::testing::Values(Arrangement::kSlotMajor,
                                           Arrangement::kLayerMajor),
                         [](const auto& param) {
                           return std::string(ArrangementName(param.param));
                         });

}  // namespace
}  // namespace statecache

namespace statecache {
namespace {

// The seal's in-place read: a slot-major region hashes each slot where it
// lies, equal to hashing the image ReadSlots copies out; a layer-major one
// says it cannot (the caller reads images out instead).
TEST_P(RetainedRegionTest, ChecksumsInPlaceEqualThoseOfTheImages) {
  std::unique_ptr<HostDevice> device = MakeDevice(6, 10, false);
  ASSERT_NE(device, nullptr);
  FillSlots(*device, 23);
  const std::vector<int64_t> slots = {4, 0, 5, 2};
  std::vector<uint64_t> sums(slots.size());
  if (GetParam() == Arrangement::kLayerMajor) {
    EXPECT_FALSE(device->CanChecksumInPlace());
    EXPECT_EQ(device->ChecksumSlots(slots, absl::MakeSpan(sums)).code(),
              absl::StatusCode::kUnimplemented);
    return;
  }
  ASSERT_TRUE(device->CanChecksumInPlace());
  ASSERT_TRUE(device->ChecksumSlots(slots, absl::MakeSpan(sums)).ok());
  const uint64_t b = device->layout().bytes_per_slot();
  for (size_t k = 0; k < slots.size(); ++k) {
    const std::vector<char> image = Image(device->layout(), 23, slots[k]);
    ASSERT_EQ(image.size(), b);
    EXPECT_EQ(sums[k], Checksum(image.data(), image.size())) << slots[k];
  }
  EXPECT_NE(sums[0], sums[1]);
  // A slot outside the region hashes nothing.
  std::vector<uint64_t> untouched(2, 7);
  const std::vector<int64_t> bad = {1, 6};
  EXPECT_EQ(device->ChecksumSlots(bad, absl::MakeSpan(untouched)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(untouched, std::vector<uint64_t>(2, 7));
}

}  // namespace
}  // namespace statecache
