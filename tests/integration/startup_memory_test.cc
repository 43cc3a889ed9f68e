// statecached when its state memory cannot be had at start: asked for more
// than /dev/shm (a tmpfs with a size limit, as it is on every distribution
// and in every container) holds, it exits 2 (a configuration error) with
// one message saying what it asked for, why it failed and what to change,
// and leaves no shared-memory object behind. Nothing is allocated on the
// way: tmpfs refuses an fallocate larger than the filesystem up front.
#include <dirent.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_process.h"

namespace statecache::testing {
namespace {

// One f32 tensor of 2^18 elements in one layer: 1 MiB a slot.
constexpr char kLayoutJson[] = R"({"name": "it-one-mib", "num_layers": 1,
  "tensors": [{"name": "ssm", "dtype": "f32", "shape": [262144]}]})";
constexpr uint64_t kSlotBytes = uint64_t{1} << 20;

// Names in /dev/shm that contain `part`.
std::vector<std::string> ShmObjectsNaming(const std::string& part) {
  std::vector<std::string> found;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return found;
  while (const dirent* entry = readdir(dir)) {
    if (absl::StrContains(entry->d_name, part)) found.push_back(entry->d_name);
  }
  closedir(dir);
  return found;
}

TEST(StartupMemoryTest, StateMemoryLargerThanDevShmExitsTwoSayingSo) {
  struct statfs fs_type;
  ASSERT_EQ(statfs("/dev/shm", &fs_type), 0);
  struct statvfs fs;
  ASSERT_EQ(statvfs("/dev/shm", &fs), 0);
  // Only a bounded tmpfs refuses at once; an unbounded one would try.
  if (fs_type.f_type != TMPFS_MAGIC || fs.f_blocks == 0) {
    GTEST_SKIP() << "/dev/shm is not a tmpfs with a size limit";
  }
  const uint64_t shm_bytes = static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize;
  // Twice what the filesystem holds, however empty it is.
  const uint64_t num_slots = 2 * (shm_bytes / kSlotBytes) + 16;
  if (num_slots > (uint64_t{1} << 30)) {
    GTEST_SKIP() << "/dev/shm (" << shm_bytes << " bytes) is larger than "
                 << "the most slots of this layout can ask for";
  }

  absl::StatusOr<TempDir> dir = TempDir::Create();
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string layout = dir->path() + "/layout.json";
  std::ofstream(layout) << kLayoutJson;
  const std::string log = dir->path() + "/stderr";
  Subprocess::Options options;
  options.argv = {StatecachedPath(), "--layout=" + layout,
                  absl::StrCat("--num_slots=", num_slots),
                  "--listen=unix:" + dir->path() + "/s.sock",
                  "--metrics_address="};
  options.stderr_path = log;
  absl::StatusOr<std::unique_ptr<Subprocess>> daemon =
      Subprocess::Start(std::move(options));
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const pid_t pid = (*daemon)->pid();
  absl::StatusOr<ExitInfo> exit = (*daemon)->Wait(absl::Seconds(30));
  ASSERT_TRUE(exit.ok()) << exit.status();
  const std::string err = ReadFileOrEmpty(log);
  EXPECT_TRUE(exit->exited) << exit->ToString() << "\n" << err;
  EXPECT_EQ(exit->code, 2) << err;
  // What was asked for, why it failed, and what to change.
  EXPECT_TRUE(absl::StrContains(err, "cannot create the state memory")) << err;
  EXPECT_TRUE(absl::StrContains(
      err, absl::StrCat(num_slots, " slots of ", kSlotBytes, " bytes")))
      << err;
  EXPECT_TRUE(absl::StrContains(err, "No space left on device")) << err;
  EXPECT_TRUE(absl::StrContains(err, absl::StrCat(" free of ", shm_bytes)))
      << err;
  EXPECT_TRUE(absl::StrContains(err, "lower --num_slots")) << err;
  // The object it made is gone with it (its name carries the pid).
  EXPECT_TRUE(ShmObjectsNaming(absl::StrCat("-", pid, "-")).empty());
}

}  // namespace
}  // namespace statecache::testing
