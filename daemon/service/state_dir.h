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
  // Creates `path` (mode 0700) when missing and takes its lock.
  // Errors: FAILED_PRECONDITION another daemon holds the lock;
  //   INVALID_ARGUMENT an empty path or not a directory; PERMISSION_DENIED /
  //   INTERNAL from the system calls.
  static absl::StatusOr<std::unique_ptr<StateDir>> Open(std::string path);
  ~StateDir();  // releases the lock

  const std::string& path() const { return path_; }

  // Errors: NOT_FOUND there is no index (a first start); DATA_LOSS a torn or
  //   corrupt one (DecodeSavedState's message); INTERNAL unreadable.
  absl::StatusOr<SavedState> ReadIndex() const;
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
  StateDir(std::string path, int lock_fd)
      : path_(std::move(path)), lock_fd_(lock_fd) {}
  std::string PathOf(std::string_view name) const;
  // Writes `name` through name.tmp, fsync and rename, then fsyncs the
  // directory.
  absl::Status WriteAtomically(std::string_view name, const char* data,
                               uint64_t size);

  const std::string path_;
  const int lock_fd_;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_SERVICE_STATE_DIR_H_
