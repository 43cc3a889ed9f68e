// StateDir (daemon/service/state_dir.h) on real files in a temporary
// directory: the lock keeps a second daemon out while the first lives; the
// index round-trips, is NOT_FOUND when absent and DATA_LOSS when torn, and
// is set aside by RejectIndex; images files round-trip through a mapping;
// untrusted names are refused; no temporary file outlives a write.
#include "daemon/service/state_dir.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace statecache {
namespace {

namespace fs = std::filesystem;

// A fresh directory under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char name[] = "/tmp/statecache_state_dir_XXXXXX";
    const char* made = mkdtemp(name);
    EXPECT_NE(made, nullptr);
    path_ = made != nullptr ? made : "";
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const {
    return path_ + "/" + name;
  }

 private:
  std::string path_;
};

std::set<std::string> Names(const std::string& dir) {
  std::set<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    names.insert(e.path().filename().string());
  }
  return names;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

SavedState AState(uint64_t epoch) {
  SavedState s;
  s.fingerprint = "identity=m;transfer=fork";
  s.epoch = epoch;
  s.bytes_per_slot = 640;
  s.region = {"/statecache-3-10-20-kept", 8, 4, 4 * 640};
  s.device = {{7, 0, false, 11}, {8, 3, true, 12}};
  s.tier_images = "tier-3.images";
  s.tier = {{9, 0, false, 13}};
  return s;
}

std::unique_ptr<StateDir> MustOpen(const std::string& path) {
  absl::StatusOr<std::unique_ptr<StateDir>> dir = StateDir::Open(path);
  EXPECT_TRUE(dir.ok()) << dir.status();
  return dir.ok() ? std::move(*dir) : nullptr;
}

TEST(StateDirTest, TheLockKeepsASecondOpenOutWhileTheFirstLives) {
  TempDir tmp;
  const std::string path = tmp / "state";  // created by Open
  std::unique_ptr<StateDir> first = MustOpen(path);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->path(), path);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::unique_ptr<StateDir>> second = StateDir::Open(path);
    EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition)
        << second.status();
  }
  first.reset();
  std::unique_ptr<StateDir> third = MustOpen(path);
  ASSERT_NE(third, nullptr);
  EXPECT_EQ(StateDir::Open(path).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(StateDirTest, BadPathsAreInvalidArguments) {
  TempDir tmp;
  EXPECT_EQ(StateDir::Open("").status().code(),
            absl::StatusCode::kInvalidArgument);
  std::ofstream(tmp / "file") << "not a directory";
  EXPECT_EQ(StateDir::Open(tmp / "file").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(StateDir::Open(tmp / "missing/deeper").ok());
}

// With the directory mode 0777, another user planted index.tmp
// and lock as symlinks, and a root daemon wrote through both.
TEST(StateDirTest, PlantedFilesAreRefusedAndNeverWrittenThrough) {
  TempDir tmp;
  const std::string state = tmp / "state";
  ASSERT_EQ(mkdir(state.c_str(), 0700), 0);
  ASSERT_EQ(chmod(state.c_str(), 0777), 0);
  std::ofstream(tmp / "victim") << "precious";
  ASSERT_EQ(symlink((tmp / "victim").c_str(), (state + "/index.tmp").c_str()),
            0);
  ASSERT_EQ(symlink((tmp / "planted").c_str(), (state + "/lock").c_str()), 0);
  absl::StatusOr<std::unique_ptr<StateDir>> opened = StateDir::Open(state);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(opened.status().message(), state));
  EXPECT_TRUE(absl::StrContains(opened.status().message(),
                                "writable by others (mode 0777)"))
      << opened.status();
  // Closed to others, what was planted is still refused, by name.
  ASSERT_EQ(chmod(state.c_str(), 0700), 0);
  opened = StateDir::Open(state);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(opened.status().message(), "is a symlink"))
      << opened.status();
  EXPECT_EQ(ReadAll(tmp / "victim"), "precious");
  EXPECT_FALSE(fs::exists(tmp / "planted"));
  // A file others may write is as good as theirs.
  ASSERT_EQ(unlink((state + "/index.tmp").c_str()), 0);
  ASSERT_EQ(unlink((state + "/lock").c_str()), 0);
  std::ofstream(state + "/index") << "theirs";
  ASSERT_EQ(chmod((state + "/index").c_str(), 0666), 0);
  opened = StateDir::Open(state);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(opened.status().message(), state + "/index"))
      << opened.status();
  // Removed, the directory is the daemon's again.
  ASSERT_EQ(unlink((state + "/index").c_str()), 0);
  std::unique_ptr<StateDir> dir = MustOpen(state);
  ASSERT_NE(dir, nullptr);
  ASSERT_TRUE(dir->WriteIndex(AState(1)).ok());
  EXPECT_EQ(ReadAll(tmp / "victim"), "precious");
}

// A crash's leftover temporary is the daemon's own: replaced, never
// written through or into.
TEST(StateDirTest, ALeftoverTemporaryIsMadeAfresh) {
  TempDir tmp;
  std::unique_ptr<StateDir> dir = MustOpen(tmp.path());
  ASSERT_NE(dir, nullptr);
  dir.reset();
  std::ofstream(tmp / "index.tmp") << "half of an old write";
  struct stat before;
  ASSERT_EQ(stat((tmp / "index.tmp").c_str(), &before), 0);
  dir = MustOpen(tmp.path());
  ASSERT_NE(dir, nullptr);
  ASSERT_TRUE(dir->WriteIndex(AState(3)).ok());
  EXPECT_EQ(*dir->ReadIndex(), AState(3));
  EXPECT_EQ(Names(tmp.path()), (std::set<std::string>{"lock", "index"}));
}

// The socket's and the state directory's ancestors went
// unchecked. Every directory above must be root's or the daemon's user's,
// closed to others' writes unless sticky.
TEST(StateDirTest, AnotherUsersDirectoryOrAncestorIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "giving a directory away needs root";
  TempDir tmp;
  const std::string theirs = tmp / "theirs";
  ASSERT_EQ(mkdir(theirs.c_str(), 0755), 0);
  ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
  absl::StatusOr<std::unique_ptr<StateDir>> opened =
      StateDir::Open(theirs + "/run/state");
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(opened.status().message(),
                                theirs + " belongs to uid 65534"))
      << opened.status();
  EXPECT_FALSE(fs::exists(theirs + "/run"));
  // The directory itself another user's.
  ASSERT_EQ(chown(theirs.c_str(), 0, 0), 0);
  const std::string state = theirs + "/state";
  ASSERT_EQ(mkdir(state.c_str(), 0700), 0);
  ASSERT_EQ(chown(state.c_str(), 65534, 65534), 0);
  opened = StateDir::Open(state);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kPermissionDenied)
      << opened.status();
  // A file in it another user's.
  ASSERT_EQ(chown(state.c_str(), 0, 0), 0);
  std::ofstream(state + "/tier-1.images") << "theirs";
  ASSERT_EQ(chown((state + "/tier-1.images").c_str(), 65534, 65534), 0);
  opened = StateDir::Open(state);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(opened.status().message(), "tier-1.images"))
      << opened.status();
}

// What cannot be tampered with is fine: a sticky ancestor (as /tmp) and a
// symlink the daemon's user owns in a trusted directory. A symlink another
// user planted on the way is not.
TEST(StateDirTest, AStickyAncestorAndATrustedSymlinkAreFine) {
  TempDir tmp;
  ASSERT_EQ(chmod(tmp.path().c_str(), 01777), 0);
  ASSERT_EQ(mkdir((tmp / "real").c_str(), 0700), 0);
  ASSERT_EQ(symlink((tmp / "real").c_str(), (tmp / "link").c_str()), 0);
  std::unique_ptr<StateDir> dir = MustOpen(tmp / "link");
  ASSERT_NE(dir, nullptr);
  ASSERT_TRUE(dir->WriteIndex(AState(1)).ok());
  EXPECT_TRUE(fs::exists(tmp / "real/index"));
  dir.reset();
  if (geteuid() != 0) return;  // giving a symlink away needs root
  ASSERT_EQ(lchown((tmp / "link").c_str(), 65534, 65534), 0);
  absl::StatusOr<std::unique_ptr<StateDir>> opened =
      StateDir::Open(tmp / "link");
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(opened.status().message(), "symlink"))
      << opened.status();
}

TEST(StateDirTest, TheIndexRoundTripsAndATornOneIsDataLoss) {
  TempDir tmp;
  std::unique_ptr<StateDir> dir = MustOpen(tmp.path());
  ASSERT_NE(dir, nullptr);
  EXPECT_EQ(dir->ReadIndex().status().code(), absl::StatusCode::kNotFound);

  ASSERT_TRUE(dir->WriteIndex(AState(1)).ok());
  absl::StatusOr<SavedState> read = dir->ReadIndex();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, AState(1));
  EXPECT_EQ(ReadAll(tmp / "index"), EncodeSavedState(AState(1)));
  // Replaced whole by the next write.
  ASSERT_TRUE(dir->WriteIndex(AState(2)).ok());
  EXPECT_EQ(*dir->ReadIndex(), AState(2));
  EXPECT_EQ(Names(tmp.path()), (std::set<std::string>{"lock", "index"}));

  // Torn: the file cut short.
  const std::string index = tmp / "index";
  const auto size = fs::file_size(index);
  fs::resize_file(index, size - 3);
  EXPECT_EQ(dir->ReadIndex().status().code(), absl::StatusCode::kDataLoss);
  fs::resize_file(index, 0);
  EXPECT_EQ(dir->ReadIndex().status().code(), absl::StatusCode::kDataLoss);
  // Rewritten: readable again (the write replaces, never appends).
  ASSERT_TRUE(dir->WriteIndex(AState(3)).ok());
  EXPECT_EQ(*dir->ReadIndex(), AState(3));
}

TEST(StateDirTest, RejectIndexSetsItAside) {
  TempDir tmp;
  std::unique_ptr<StateDir> dir = MustOpen(tmp.path());
  ASSERT_NE(dir, nullptr);
  // Nothing to reject: fine.
  EXPECT_TRUE(dir->RejectIndex().ok());
  ASSERT_TRUE(dir->WriteIndex(AState(5)).ok());
  ASSERT_TRUE(dir->RejectIndex().ok());
  EXPECT_EQ(dir->ReadIndex().status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadAll(tmp / "index.rejected"), EncodeSavedState(AState(5)));
  // A later rejection replaces the older one.
  ASSERT_TRUE(dir->WriteIndex(AState(6)).ok());
  ASSERT_TRUE(dir->RejectIndex().ok());
  EXPECT_EQ(ReadAll(tmp / "index.rejected"), EncodeSavedState(AState(6)));
  EXPECT_EQ(Names(tmp.path()),
            (std::set<std::string>{"lock", "index.rejected"}));
}

TEST(StateDirTest, ImagesNamesAreCheckedBeforeAnyFileIsTouched) {
  EXPECT_TRUE(ValidImagesName("device-1.images"));
  EXPECT_TRUE(ValidImagesName("Tier_2-x.images"));
  EXPECT_TRUE(ValidImagesName(std::string(57, 'a') + ".images"));  // 64
  for (const std::string& bad :
       {std::string("../x.images"), std::string("a/b.images"), std::string("x"),
        std::string(".images"), std::string("x.image"),
        std::string("x.images.tmp"), std::string("index"),
        std::string("a.b.images"), std::string("a b.images"),
        std::string("/tmp/x.images"), std::string("x.images/"),
        std::string(58, 'a') + ".images", std::string("")}) {
    EXPECT_FALSE(ValidImagesName(bad)) << bad;
  }

  TempDir tmp;
  std::unique_ptr<StateDir> dir = MustOpen(tmp / "d");
  ASSERT_NE(dir, nullptr);
  const char data[] = "images";
  for (const char* bad : {"../x.images", "a/b.images", "x", "index"}) {
    EXPECT_EQ(dir->WriteImages(bad, data, sizeof(data)).code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
    EXPECT_EQ(dir->MapImages(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
    EXPECT_EQ(dir->RemoveImages(bad).code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
  // Nothing was written anywhere: not in the directory, not beside it.
  EXPECT_EQ(Names(tmp / "d"), (std::set<std::string>{"lock"}));
  EXPECT_EQ(Names(tmp.path()), (std::set<std::string>{"d"}));
}

TEST(StateDirTest, ImagesRoundTripThroughAMapping) {
  TempDir tmp;
  std::unique_ptr<StateDir> dir = MustOpen(tmp.path());
  ASSERT_NE(dir, nullptr);
  std::vector<char> bytes(3 * 4096 + 17);
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<char>(i * 31 + (i >> 9));
  }
  ASSERT_TRUE(
      dir->WriteImages("device-7.images", bytes.data(), bytes.size()).ok());
  ASSERT_TRUE(dir->WriteImages("empty.images", nullptr, 0).ok());
  ASSERT_TRUE(dir->WriteIndex(AState(7)).ok());
  EXPECT_EQ(Names(tmp.path()),
            (std::set<std::string>{"lock", "index", "device-7.images",
                                   "empty.images"}));

  absl::StatusOr<std::unique_ptr<MappedFile>> mapped =
      dir->MapImages("device-7.images");
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  ASSERT_EQ((*mapped)->size(), bytes.size());
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), (*mapped)->data()));
  absl::StatusOr<std::unique_ptr<MappedFile>> empty =
      dir->MapImages("empty.images");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ((*empty)->size(), 0u);

  // Replacing the file leaves the old mapping's bytes as they were.
  std::vector<char> other(bytes.size(), 'z');
  ASSERT_TRUE(
      dir->WriteImages("device-7.images", other.data(), other.size()).ok());
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), (*mapped)->data()));
  absl::StatusOr<std::unique_ptr<MappedFile>> remapped =
      dir->MapImages("device-7.images");
  ASSERT_TRUE(remapped.ok());
  EXPECT_TRUE(std::equal(other.begin(), other.end(), (*remapped)->data()));

  EXPECT_EQ(dir->MapImages("missing.images").status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(dir->RemoveImages("device-7.images").ok());
  EXPECT_TRUE(dir->RemoveImages("device-7.images").ok());  // already gone
  EXPECT_EQ(dir->MapImages("device-7.images").status().code(),
            absl::StatusCode::kNotFound);
  // No *.tmp anywhere after all those writes.
  EXPECT_EQ(Names(tmp.path()),
            (std::set<std::string>{"lock", "index", "empty.images"}));
}

}  // namespace
}  // namespace statecache
