// Shared-memory names and the cleanup of objects whose daemon died.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/device/host_device.h"
#include "daemon/device/shm_name.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/device/host_test_util.h"
#include "tests/device/probe_process.h"

namespace statecache {
namespace {

using ::testing::Contains;
using testing::DeadPid;
using testing::MakeShmObject;
using ::testing::Not;
using testing::ShmExists;
using ::testing::UnorderedElementsAre;

TEST(ShmNameTest, FormatsAndParses) {
  const ShmOwner owner = {1234, 987654};
  const std::string name = FormatShmName("statecache", 42, owner);
  EXPECT_EQ(name, "/statecache-42-1234-987654");
  std::optional<ShmName> parsed = ParseShmName(name, "statecache");
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->epoch, 42u);
  EXPECT_EQ(parsed->owner, owner);
  EXPECT_TRUE(ParseShmName("statecache-42-1234-987654", "statecache"));
  for (const char* bad :
       {"statecache-42-1234", "statecache-42-1234-9-9", "statecachex-1-2-3",
        "other-1-2-3", "statecache-a-2-3", "statecache--2-3",
        "statecache-1-0-3", "statecache"}) {
    EXPECT_FALSE(ParseShmName(bad, "statecache").has_value()) << bad;
  }
  EXPECT_TRUE(ValidShmPrefix("statecache_ci.1"));
  EXPECT_FALSE(ValidShmPrefix("a-b"));
  EXPECT_FALSE(ValidShmPrefix("a/b"));
  EXPECT_FALSE(ValidShmPrefix(""));
}

TEST(ShmNameTest, OwnerLiveness) {
  const ShmOwner me = CurrentShmOwner();
  EXPECT_EQ(me.pid, getpid());
  EXPECT_GT(me.start_time, 0u);  // /proc is readable here
  EXPECT_TRUE(ShmOwnerAlive(me));
  EXPECT_FALSE(ShmOwnerAlive({me.pid, me.start_time + 1}));  // pid reused
  EXPECT_FALSE(ShmOwnerAlive({DeadPid(), 0}));
}

TEST(ShmCleanupTest, RemovesOnlyObjectsOfDeadOwners) {
  const std::string prefix = absl::StrCat("sccleanup", getpid());
  const ShmOwner me = CurrentShmOwner();
  const std::string dead = FormatShmName(prefix, 1, {DeadPid(), 5}).substr(1);
  const std::string reused =
      FormatShmName(prefix, 2, {me.pid, me.start_time + 7}).substr(1);
  const std::string live = FormatShmName(prefix, 3, me).substr(1);
  const std::string junk = prefix + "-not-a-daemon";
  const std::string other =
      FormatShmName(prefix + "x", 4, {DeadPid(), 5}).substr(1);
  for (const std::string& name : {dead, reused, live, junk, other}) {
    MakeShmObject(name);
  }
  absl::StatusOr<std::vector<std::string>> removed = CleanupStaleShm(prefix);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed, UnorderedElementsAre(dead, reused));
  EXPECT_FALSE(ShmExists(dead));
  EXPECT_FALSE(ShmExists(reused));
  EXPECT_TRUE(ShmExists(live));
  EXPECT_TRUE(ShmExists(junk));
  EXPECT_TRUE(ShmExists(other));
  for (const std::string& name : {live, junk, other}) {
    shm_unlink(("/" + name).c_str());
  }
  EXPECT_EQ(CleanupStaleShm("bad-prefix").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// One container per GPU, each daemon pid 1, /dev/shm shared (hostIPC): the
// other daemon's object names a pid that, here, is a different process. Its
// owner lock is what keeps it: held, it stays; free, it goes.
TEST(ShmCleanupTest, AnObjectWhoseOwnerHoldsItsLockStaysWhateverItsPidSays) {
  const std::string prefix = absl::StrCat("scnamespace", getpid());
  const ShmOwner me = CurrentShmOwner();
  // By pid alone this owner is dead (our pid, another start time).
  const std::string name =
      FormatShmName(prefix, 1, {me.pid, me.start_time + 9}).substr(1);
  MakeShmObject(name);
  const int held = open(("/dev/shm/" + name).c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(held, 0);
  ASSERT_EQ(flock(held, LOCK_EX | LOCK_NB), 0);
  absl::StatusOr<std::vector<std::string>> removed = CleanupStaleShm(prefix);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed, Not(Contains(name)));
  EXPECT_TRUE(ShmExists(name));
  close(held);  // the owner is gone
  removed = CleanupStaleShm(prefix);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed, UnorderedElementsAre(name));
  EXPECT_FALSE(ShmExists(name));
}

// A live daemon's own object carries its lock: a HostDevice holds it.
TEST(ShmCleanupTest, AHostDeviceHoldsItsObjectsOwnerLock) {
  const std::string prefix = absl::StrCat("sclock", getpid());
  testing::ProbeProcess probe(STATECACHE_REGION_PROBE);
  const std::string reply = probe.Ask(absl::StrCat("create ", prefix, " 3"));
  ASSERT_THAT(reply, ::testing::StartsWith("ok /" + prefix + "-3-"));
  const int fd =
      open(("/dev/shm/" + reply.substr(4)).c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_NE(flock(fd, LOCK_EX | LOCK_NB), 0);
  EXPECT_EQ(errno, EWOULDBLOCK);
  close(fd);
}

// The real crash: a process that created a HostDevice is SIGKILLed, and the
// next daemon's CleanupStale removes its object.
TEST(ShmCleanupTest, KilledDaemonsObjectIsRemoved) {
  const std::string prefix = absl::StrCat("sckilled", getpid());
  std::string name;
  {
    testing::ProbeProcess probe(STATECACHE_REGION_PROBE);
    const std::string reply = probe.Ask(absl::StrCat("create ", prefix, " 7"));
    ASSERT_THAT(reply, ::testing::StartsWith("ok /" + prefix + "-7-"));
    name = reply.substr(4);
    EXPECT_TRUE(ShmExists(name));
    // Still alive: nothing to clean.
    absl::StatusOr<std::vector<std::string>> none =
        HostDevice::CleanupStale(prefix);
    ASSERT_TRUE(none.ok());
    EXPECT_TRUE(none->empty());
    kill(probe.pid(), SIGKILL);
  }                              // reaped here
  EXPECT_TRUE(ShmExists(name));  // nobody unlinked it
  absl::StatusOr<std::vector<std::string>> removed =
      HostDevice::CleanupStale(prefix);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed, UnorderedElementsAre(name));
  EXPECT_FALSE(ShmExists(name));
}

}  // namespace
}  // namespace statecache
