// StateDir: the daemon's state directory (--state_dir), the files in it
// and how each is written.
//
//   lock          an exclusive flock held for the daemon's life: two
//                 daemons never share a directory.
//   index.rejected  an index made under another fingerprint, set aside.
//   index         the SavedState (daemon/core/saved_state.h), replaced
//                 atomically: written to index.tmp, fsynced, renamed over
//                 index, the directory fsynced. A crash leaves the old index
//                 or the new one, never a mix; a torn write cannot pass the
//                 index's own checksum.
//   *.images      checkpoint images written at shutdown (the GPU backends'
//                 device checkpoints, the host tier's entries), written the
//                 same way before the index that names them.
//
// Names in the index are not trusted: files are opened only by names of
// the form ValidImagesName accepts, inside the directory.
//
// Nor is the directory taken on faith (daemon/common/trusted_path.h): every
// directory above it must be root's or the daemon's user's and closed to
// others' writes (sticky excepted), it must be the daemon's own and
// writable by nobody else, and each of the daemon's files in it a regular
// file of the daemon's user that nobody else may write. Files are reached
// through the directory's descriptor, never followed through a symlink
// (O_NOFOLLOW), and temporaries are created afresh (O_EXCL), so nothing
// planted in the directory is written through.
//
// Thread-safety: thread-compatible (the daemon writes from one thread at a
// time: its maintenance thread, then its shutdown).
#ifndef STATECACHE_DAEMON_SERVICE_STATE_DIR_H_
#define STATECACHE_DAEMON_SERVICE_STATE_DIR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/core/saved_state.h"

namespace statecache {

// A file mapped read-only. Only this daemon writes the directory (its lock
// says so), and only through WriteAtomically's rename, which leaves a
// mapped file's bytes as they were.
class MappedFile {
 public:
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();
  const char* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  friend class StateDir;
  MappedFile(const char* data, uint64_t size) : data_(data), size_(size) {}
  const char* data_;
  uint64_t size_;
};

// "<letters, digits, '-', '_'>.images", at most 64 characters.
bool ValidImagesName(std::string_view name);

class StateDir {
 public:
  // Checks `path` and its ancestors, creates it (mode 0700) when missing,
  // checks the daemon's files in it, and takes its lock.
  // Errors: FAILED_PRECONDITION another daemon holds the lock, or `path`
  //   is not a directory; INVALID_ARGUMENT an empty path; PERMISSION_DENIED
  //   a directory or file on it that the checks above refuse (the message
  //   names it and what is wrong); INTERNAL from the system calls.
  static absl::StatusOr<std::unique_ptr<StateDir>> Open(std::string path);
  ~StateDir();  // releases the lock

  const std::string& path() const { return path_; }

  // Errors: NOT_FOUND there is no index (a first start); DATA_LOSS a torn or
  //   corrupt one (DecodeSavedState's message); INTERNAL unreadable.
  absl::StatusOr<SavedState> ReadIndex() const;
  // The same for index.rejected.
  absl::StatusOr<SavedState> ReadRejectedIndex() const;
  // Replaces the index atomically (see above).
  absl::Status WriteIndex(const SavedState& state);
  // Renames the index to index.rejected (replacing an older one), so a
  // daemon started with the wrong flags does not destroy what the right
  // ones could restore: an operator can move it back.
  absl::Status RejectIndex();

  // Writes `name` (ValidImagesName) atomically with [data, data + size).
  absl::Status WriteImages(std::string_view name, const char* data,
                           uint64_t size);
  // Errors: INVALID_ARGUMENT a bad name; NOT_FOUND missing; INTERNAL.
  absl::StatusOr<std::unique_ptr<MappedFile>> MapImages(
      std::string_view name) const;
  // Removes `name` if it is there. Errors: INVALID_ARGUMENT a bad name.
  absl::Status RemoveImages(std::string_view name);

 private:
  StateDir(std::string path, int dir_fd, int lock_fd)
      : path_(std::move(path)), dir_fd_(dir_fd), lock_fd_(lock_fd) {}
  std::string PathOf(std::string_view name) const;
  absl::StatusOr<SavedState> ReadSavedState(std::string_view name) const;
  // Opens `name` in the directory for reading, refusing a symlink or a
  // file CheckOwnFile refuses. Returns the descriptor.
  absl::StatusOr<int> OpenForReading(std::string_view name) const;
  // Writes `name` through name.tmp, fsync and rename, then fsyncs the
  // directory.
  absl::Status WriteAtomically(std::string_view name, const char* data,
                               uint64_t size);

  const std::string path_;
  const int dir_fd_;  // every file is reached through it
  const int lock_fd_;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_SERVICE_STATE_DIR_H_
