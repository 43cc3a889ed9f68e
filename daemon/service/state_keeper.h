// StateKeeper: the daemon's side of a warm restart (--state_dir). It keeps
// the state directory (state_dir.h) in step with the cache's checkpoints,
// and at start brings back what the previous daemon left there, verified.
//
// What is written when:
//   * At start, after the restore: a fresh index, naming this daemon's
//     region.
//   * Every Save (the maintenance thread, each --state_save_interval): the
//     index again when the checkpoints changed. On the host backend the
//     index names the checkpoints where they are, in the state region, which
//     outlives the process (HostDeviceOptions::retain): a crash loses only
//     what was published since the last save, and any checkpoint whose slot
//     was reused since (its checksum no longer matches: dropped).
//   * At shutdown (SaveForShutdown, after the last Step): the device
//     checkpoints' images and the host tier's, each into an images file,
//     then the index naming them (not the region: on the host backend the
//     daemon then removes its region, and what it held survives a reboot
//     when the directory is on disk). On a backend whose memory dies with
//     the process (the GPUs) those files are the only copy: they stay
//     valid (their bytes never change) and are carried in every later
//     index until the next shutdown replaces them, so a crash after a clean
//     restart still has them. The host backend's next start copies the
//     device images into its region and removes the file.
//
// At start (Restore), nothing is trusted before it is checked: an index
// made under another fingerprint (identity, transfer, layout) is set aside
// (index.rejected) and the daemon starts empty; a torn or corrupt index is
// an empty start; every checkpoint whose bytes do not match their checksum
// is dropped, never indexed. Whatever happens, the daemon starts, and says
// how in its log and in GetStats' warm_restart (and so in the metrics).
//
// Thread-safety: thread-compatible: one caller at a time (the daemon's
// start, its maintenance thread, then its shutdown).
#ifndef STATECACHE_DAEMON_SERVICE_STATE_KEEPER_H_
#define STATECACHE_DAEMON_SERVICE_STATE_KEEPER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/core/saved_state.h"
#include "daemon/service/state_cache.h"
#include "daemon/service/state_dir.h"
#include "proto/statecache/v1/statecache.pb.h"

namespace statecache {

class StateKeeper {
 public:
  // `cache` is not owned and must outlive this; `shm_prefix` is the host
  // backend's (a retained region is accepted only under it).
  // REQUIRES: the cache has state memory.
  StateKeeper(std::unique_ptr<StateDir> dir, StateCache* cache,
              std::string shm_prefix);

  // Restores what the directory holds into the (fresh) cache and writes
  // the new index. Never fails: every problem is an empty (or partial)
  // start, reported in the returned stats (also set on the cache).
  v1::WarmRestartStats Restore();
  // Writes the index if the checkpoints changed since the last write.
  absl::Status Save();
  // Writes the images files and the index (see above). On success the
  // region need not outlive the process. REQUIRES: no Step runs any more.
  absl::Status SaveForShutdown();

  // The retained regions a later start may still restore from, which a
  // reclaim of orphans (ReclaimOrphanedRetainedShm) must spare: the one
  // index.rejected names (restarted with the right flags, an operator can
  // move it back) and the one the index names.
  std::vector<std::string> SparedRegions() const;

 private:
  // Restore's steps; each returns the reason it could not go on.
  absl::Status RestoreFrom(const SavedState& saved);
  // Maps the images file `name` into `file` and points `images` at the
  // image of each of `saved` in it.
  // Errors: the file's (missing, unreadable), or one too short for them.
  absl::Status MapSection(const std::string& name,
                          const std::vector<SlotMemory::SavedCheckpoint>& saved,
                          uint64_t image_bytes,
                          std::unique_ptr<MappedFile>& file,
                          std::vector<SlotMemory::RestoreImage>& images) const;
  // The index for the checkpoints as they are now.
  absl::StatusOr<SavedState> Compose();
  absl::Status Write(const SavedState& state);
  void Publish();

  std::unique_ptr<StateDir> dir_;
  StateCache* const cache_;
  const std::string shm_prefix_;
  // The host backend's region outlives the process; GPU memory does not.
  const bool region_outlives_;
  // The sections of the last shutdown's images files (see above).
  std::string device_images_;
  std::vector<SlotMemory::SavedCheckpoint> device_carried_;
  std::string tier_images_;
  std::vector<SlotMemory::SavedCheckpoint> tier_carried_;
  std::optional<SavedState> last_written_;
  // SaveForShutdown wrote the device checkpoints' images: the index names
  // those, not the region.
  bool stopped_ = false;
  v1::WarmRestartStats stats_;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_SERVICE_STATE_KEEPER_H_
