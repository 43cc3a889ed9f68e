// StepChannelClient: the client's end of a step channel (the contract is
// proto/step_channel.h): Steps through a shared-memory object the daemon made
// for this session, instead of gRPC. Internal to statecache::Client, which
// opens one at Attach (AttachOptions::transport) and falls back to gRPC when
// it cannot be used.
//
// Thread-safety: not thread-safe; the Client serialises its calls.
#ifndef STATECACHE_CLIENT_STEP_CHANNEL_CLIENT_H_
#define STATECACHE_CLIENT_STEP_CHANNEL_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/statecache/v1/statecache.grpc.pb.h"

namespace statecache {

class StepChannelClient {
 public:
  // Opens a channel for session `session_id` through `stub` (whose call
  // gets `timeout`) and maps it.
  // Errors: OpenStepChannel's; FAILED_PRECONDITION for an object this
  // client cannot use (another layout version, wrong size); the OS's error
  // mapping it, as INTERNAL.
  static absl::StatusOr<std::unique_ptr<StepChannelClient>> Open(
      v1::StateCache::Stub& stub, const std::string& session_id,
      absl::Duration timeout);
  // Maps the channel an OpenStepChannel call answered with `opened` (Open's
  // second half; for tests that open through StepChannels in-process).
  // Errors: as Open's after its call.
  static absl::StatusOr<std::unique_ptr<StepChannelClient>> Map(
      const v1::OpenStepChannelResponse& opened);
  // Sends kClose (when the channel is still open) and unmaps.
  ~StepChannelClient();
  StepChannelClient(const StepChannelClient&) = delete;
  StepChannelClient& operator=(const StepChannelClient&) = delete;

  // What Step did with a pass.
  enum class Sent {
    kAnswered,  // the daemon ran it: `response` (or the returned refusal)
    kNotSent,   // too big for the request area, or the channel is closed and
                // the pass never ran: send it over gRPC
  };
  // Runs `packed` as a Step of the channel's session. A whole-step refusal
  // is returned as Step's gRPC status would be; `response` holds the
  // packed results and epoch otherwise.
  // Errors: the whole Step's refusal; UNAVAILABLE when the daemon stopped
  // beating its heartbeat while the pass was out (it may or may not have
  // run, as when a gRPC call loses its daemon): the channel is then dead.
  absl::StatusOr<Sent> Step(const v1::PackedOperations& packed,
                            v1::StepResponse* response);
  // The bare round trip (kPing). Errors: as Step's; FAILED_PRECONDITION
  // when the channel is closed.
  absl::Status Ping();

  // The daemon closed the channel, or it died: every later Step is
  // kNotSent.
  bool closed() const;

 private:
  StepChannelClient() = default;

  // Publishes the request in the area and waits for its reply; the whole
  // reply (all its parts) in reply_. kNotSent when the channel closed first.
  absl::StatusOr<Sent> RoundTrip();
  // Waits for reply_seq to reach `seq`. False when the channel closed
  // first; UNAVAILABLE when the heartbeat stopped.
  absl::StatusOr<bool> WaitForReply(uint32_t seq);

  char* base_ = nullptr;
  size_t bytes_ = 0;
  char* request_area_ = nullptr;
  size_t request_bytes_ = 0;
  const char* reply_area_ = nullptr;
  size_t reply_bytes_ = 0;
  absl::Duration heartbeat_;
  bool dead_ = false;
  std::string reply_;
};

}  // namespace statecache

#endif  // STATECACHE_CLIENT_STEP_CHANNEL_CLIENT_H_
