// StepChannels: the daemon's end of the step channels, a transport beside the
// gRPC adapter for schedulers on the same host. A session opens one over
// gRPC (OpenStepChannel); the daemon creates a POSIX shared-memory object
// laid out as proto/step_channel.h says, and a thread that serves its
// requests: each Step is copied out of the request area into a
// PackedOperations and run through StateCache::Step with the peer that
// opened the channel, and its StepResponse is written into the reply area.
// So the channel has no policy of its own: validation, fair turns, limits,
// operation metrics and results are Step's. Its Steps are reported to the
// RpcObserver as method StepChannel.
//
// Binding: a channel serves the one session it was opened for, as the peer
// (uid) that opened it; only a Unix-socket peer (or an in-process caller)
// may open one. The object is created O_EXCL with the state memory's mode
// and group and, when the daemon runs as root, owned by the peer's uid; its
// name is unlinked as soon as the first request arrives. Nothing the client
// writes is trusted: the request is copied out of the area (its header,
// then each column within the bounds the copied header gives, every count
// checked against the area) before any of it is validated or run, and the
// control words only decide when the daemon looks.
//
// A channel ends when the client sends kClose, when its session is no
// longer attached (detach, eviction, lease expiry: noticed within one
// heartbeat), when the client never sends a first request within
// first_request_timeout, or when this is destroyed; the daemon then sets
// the control block's `closed` and wakes the client.
//
// Thread-safety: thread-safe. One thread per open channel, plus one that
// beats the heartbeats and reaps ended channels.
#ifndef STATECACHE_DAEMON_CHANNEL_STEP_CHANNELS_H_
#define STATECACHE_DAEMON_CHANNEL_STEP_CHANNELS_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/grpc/rpc_observer.h"
#include "daemon/service/peer.h"
#include "daemon/service/state_cache.h"
#include "proto/statecache/v1/statecache.pb.h"

namespace statecache {

struct StepChannelOptions {
  // Channels open at once; 0 turns channels off (OpenStepChannel is
  // FAILED_PRECONDITION). Valid: 0 to 4096.
  int max_channels = 64;
  // Each area's capacity. A request larger than its area goes over gRPC;
  // a reply larger than its area is sent in parts (kContinue).
  // Valid: 4096 to 1 GiB, multiples of 8.
  size_t request_area_bytes = size_t{4} << 20;
  size_t reply_area_bytes = size_t{4} << 20;
  // The object's mode and group (-1: the daemon's), as the state memory's.
  mode_t mode = 0600;
  gid_t group = static_cast<gid_t>(-1);
  // How often the daemon beats each channel's heartbeat (and notices ended
  // sessions). Valid: 1 ms to 10 s.
  absl::Duration heartbeat = absl::Milliseconds(100);
  // How long a channel's thread polls for the next request after a reply
  // before it sleeps on the futex: a scheduler's next pass often comes
  // sooner, and a wake-up costs more than the poll. Valid: 0 to 10 ms.
  absl::Duration spin = absl::Microseconds(50);
  // How long it polls instead, after a client announced its next pass
  // (expect_seq, proto/step_channel.h), for that pass. Valid: 0 to 100 ms.
  absl::Duration expect_spin = absl::Microseconds(500);
  // A channel whose client sends nothing for this long after opening is
  // closed (its object removed). Valid: 1 ms to 1 h.
  absl::Duration first_request_timeout = absl::Seconds(30);
  // The objects' name prefix (shm_name.h's rules); stale ones of a dead
  // daemon are removed by CleanupStale.
  std::string shm_prefix = "statecache_channel";
};

class StepChannels {
 public:
  // Errors: INVALID_ARGUMENT naming the option out of range.
  static absl::Status ValidateOptions(const StepChannelOptions& options);
  // Removes the objects of `prefix` whose daemon died (shm_name.h).
  // Errors: as CleanupStaleShm's.
  static absl::Status CleanupStale(const std::string& prefix);

  // REQUIRES: ValidateOptions(options).ok(). `cache` and `observer` (may be
  // null) outlive this.
  StepChannels(StateCache* cache, StepChannelOptions options,
               RpcObserver* observer);
  // Closes every channel and joins its thread.
  ~StepChannels();
  StepChannels(const StepChannels&) = delete;
  StepChannels& operator=(const StepChannels&) = delete;

  // Opens a channel for the request's session as `peer`.
  // Errors: as OpenStepChannel's in statecache.proto.
  absl::Status Open(const v1::OpenStepChannelRequest& request,
                    v1::OpenStepChannelResponse* response, const Peer& peer)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Closes every channel (the daemon is stopping); later Opens are
  // UNAVAILABLE. Idempotent.
  void CloseAll() ABSL_LOCKS_EXCLUDED(mu_);

  // Channels open now (ended ones not yet reaped excluded).
  int open() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  class Channel;

  // The heartbeat thread: beats, closes channels whose session ended, and
  // reaps ended ones.
  void Beat();

  StateCache* const cache_;
  const StepChannelOptions options_;
  RpcObserver* const observer_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_name_ ABSL_GUARDED_BY(mu_) = 0;
  // By session id.
  absl::flat_hash_map<std::string, std::unique_ptr<Channel>> channels_
      ABSL_GUARDED_BY(mu_);
  std::thread beat_;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CHANNEL_STEP_CHANNELS_H_
