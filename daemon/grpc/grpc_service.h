// The gRPC adapters: StateCache's scheduler API (statecache.v1.StateCache)
// and operator API (statecache.v1.StateCacheAdmin) on gRPC's callback API.
//
// Each is a thin, stateless translator: a handler passes the request message
// to the matching StateCache method, maps the returned absl::Status through
// ToGrpcStatus (the one mapping point) and finishes. Handlers never block:
// StateCache methods hold its mutex only briefly, and Resize, which can take
// seconds, finishes its call later from StateCache's completion callback.
//
// StepStream runs one step per message, strictly in order: read a request,
// run it, write its response, read the next. A message the core refuses as a
// whole (unknown session, too many operations) or one naming a session other
// than the stream's first gets a StepResponse carrying error_code and
// error_message, and the stream stays open. The stream ends OK when the
// client half-closes.
//
// Logging: session attach/detach/evict at INFO (through SessionEventLog);
// one DEBUG line per RPC (and per StepStream message) at verbosity >= 1.
//
// Thread safety: thread-safe; gRPC runs handlers concurrently.
#ifndef STATECACHE_DAEMON_GRPC_GRPC_SERVICE_H_
#define STATECACHE_DAEMON_GRPC_GRPC_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "daemon/channel/step_channels.h"
#include "daemon/grpc/call_tracker.h"
#include "daemon/grpc/rpc_observer.h"
#include "daemon/grpc/session_event_log.h"
#include "daemon/service/peer.h"
#include "daemon/service/state_cache.h"
#include "proto/statecache/v1/statecache.grpc.pb.h"

namespace statecache {

// The peer a call came from: the credentials `peers` recorded for its
// connection (Unix sockets and plaintext TCP the daemon accepted itself),
// else the verified client certificate's identity (TLS), else anonymous.
// `peers` may be null.
Peer ResolvePeer(const grpc::CallbackServerContext& context,
                 const PeerTable* peers);

class StateCacheGrpcService final : public v1::StateCache::CallbackService {
 public:
  // None is owned; `observer`, `calls` and `peers` may be null. REQUIRES:
  // all outlive every call (shut the server down before destroying them).
  // `calls` counts each Step a stream is serving, from its read to its
  // reply's write; `peers` names the callers (see ResolvePeer).
  StateCacheGrpcService(StateCache* cache, SessionEventLog* events,
                        RpcObserver* observer = nullptr,
                        CallTracker* calls = nullptr,
                        const PeerTable* peers = nullptr);

  // Serves OpenStepChannel through `channels` (not owned; outlives every
  // call). Without it OpenStepChannel is FAILED_PRECONDITION.
  void SetStepChannels(StepChannels* channels) { channels_ = channels; }

  grpc::ServerUnaryReactor* Attach(grpc::CallbackServerContext* context,
                                   const v1::AttachRequest* request,
                                   v1::AttachResponse* response) override;
  grpc::ServerUnaryReactor* Detach(grpc::CallbackServerContext* context,
                                   const v1::DetachRequest* request,
                                   v1::DetachResponse* response) override;
  grpc::ServerUnaryReactor* KeepAlive(grpc::CallbackServerContext* context,
                                      const v1::KeepAliveRequest* request,
                                      v1::KeepAliveResponse* response) override;
  grpc::ServerUnaryReactor* Step(grpc::CallbackServerContext* context,
                                 const v1::StepRequest* request,
                                 v1::StepResponse* response) override;
  grpc::ServerBidiReactor<v1::StepRequest, v1::StepResponse>* StepStream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext* context,
                                 const v1::PingRequest* request,
                                 v1::PingResponse* response) override;
  grpc::ServerUnaryReactor* OpenStepChannel(
      grpc::CallbackServerContext* context,
      const v1::OpenStepChannelRequest* request,
      v1::OpenStepChannelResponse* response) override;

 private:
  StateCache* const cache_;
  SessionEventLog* const events_;
  RpcObserver* const observer_;
  CallTracker* const calls_;
  const PeerTable* const peers_;
  StepChannels* channels_ = nullptr;
};

class StateCacheAdminGrpcService final
    : public v1::StateCacheAdmin::CallbackService {
 public:
  // None is owned; `observer`, `calls` and `peers` may be null. REQUIRES:
  // all outlive every call. `calls` counts each Resize call until it is
  // over; `peers` names the callers (see ResolvePeer).
  StateCacheAdminGrpcService(StateCache* cache, SessionEventLog* events,
                             RpcObserver* observer = nullptr,
                             CallTracker* calls = nullptr,
                             const PeerTable* peers = nullptr);

  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* context,
                                     const v1::GetStatsRequest* request,
                                     v1::GetStatsResponse* response) override;
  grpc::ServerUnaryReactor* ListSessions(
      grpc::CallbackServerContext* context,
      const v1::ListSessionsRequest* request,
      v1::ListSessionsResponse* response) override;
  // Finishes when StateCache's resize completes; if the call is cancelled
  // first (client deadline, or the server's shutdown deadline passing), it
  // finishes CANCELLED at once and the resize itself carries on to its own
  // deadline.
  grpc::ServerUnaryReactor* Resize(grpc::CallbackServerContext* context,
                                   const v1::ResizeRequest* request,
                                   v1::ResizeResponse* response) override;
  grpc::ServerUnaryReactor* EvictSession(
      grpc::CallbackServerContext* context,
      const v1::EvictSessionRequest* request,
      v1::EvictSessionResponse* response) override;
  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* context,
                                  const v1::DrainRequest* request,
                                  v1::DrainResponse* response) override;

 private:
  StateCache* const cache_;
  SessionEventLog* const events_;
  RpcObserver* const observer_;
  CallTracker* const calls_;
  const PeerTable* const peers_;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_GRPC_GRPC_SERVICE_H_
