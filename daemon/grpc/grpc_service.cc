#include "daemon/grpc/grpc_service.h"

#include <google/protobuf/arena.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/grpc/arena_allocator.h"
#include "daemon/service/log.h"
#include "proto/status_mapping.h"

namespace statecache {
namespace {

// One DEBUG line per call: method, peer, outcome, time spent in the handler.
void LogCall(std::string_view method, grpc::CallbackServerContext* context,
             absl::Time start, const absl::Status& status,
             std::string_view detail = "") {
  if (log::Verbosity() < 1) return;
  LOG_DEBUG("rpc %s peer=%s%s%s -> %s (%dus)", method, context->peer(),
            detail.empty() ? "" : " ", detail,
            status.ok() ? "OK" : status.ToString(),
            absl::ToInt64Microseconds(absl::Now() - start));
}

void Observe(RpcObserver* observer, RpcMethod method,
             const absl::Status& status, absl::Time start) {
  if (observer == nullptr) return;
  observer->OnRpc(method, status.code(),
                  absl::ToDoubleSeconds(absl::Now() - start));
}

// A step's operations, in whichever form it carries them.
int OperationCount(const v1::StepRequest& request) {
  return request.operations_size() + request.packed().kinds_size();
}

}  // namespace

Peer ResolvePeer(const grpc::CallbackServerContext& context,
                 const PeerTable* peers) {
  if (peers != nullptr) {
    if (std::optional<Peer> peer = peers->Find(context.peer())) return *peer;
  }
  // Over TLS, gRPC verified the client's certificate against --tls_client_ca
  // before any call could arrive; its identity is the subject alternative
  // name, else the common name.
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    const std::vector<grpc::string_ref> identity = auth->GetPeerIdentity();
    if (!identity.empty()) {
      return Peer::Certified(
          std::string(identity.front().data(), identity.front().size()));
    }
  }
  return Peer::Anonymous();
}

namespace {

// Finishes a unary call with `status` from the core.
grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      const absl::Status& status,
                                      RpcObserver* observer, RpcMethod method,
                                      absl::Time start) {
  // Recorded before Finish, so a scrape after the reply sees this call.
  Observe(observer, method, status, start);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// ------------------------------------------------------------ StepStream

// One StepStream call: read, step, write, read... Only one gRPC operation is
// outstanding at any time, so the handlers below never run concurrently and
// Finish is called exactly once (from the read or write that ends the stream).
class StepStreamReactor final
    : public grpc::ServerBidiReactor<v1::StepRequest, v1::StepResponse> {
 public:
  StepStreamReactor(StateCache* cache, RpcObserver* observer,
                    CallTracker* calls, std::string peer, Peer caller)
      : cache_(cache),
        observer_(observer),
        calls_(calls),
        peer_(std::move(peer)),
        caller_(std::move(caller)) {
    LOG_DEBUG("rpc StepStream peer=%s opened", peer_);
    StartNextRead();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client half-closed (or the call is gone, and the status is moot).
      LOG_DEBUG("rpc StepStream peer=%s closed after %d steps", peer_, steps_);
      Finish(grpc::Status::OK);
      return;
    }
    // From here until its reply is written, a shutdown waits for this step.
    SetServing(true);
    RunStep();
    StartWrite(response_);
  }

  void OnWriteDone(bool ok) override {
    SetServing(false);
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "StepStream: the response could not be sent"));
      return;
    }
    StartNextRead();
  }

  void OnDone() override {
    SetServing(false);
    delete this;
  }

 private:
  void SetServing(bool serving) {
    if (calls_ == nullptr || serving == serving_) return;
    serving_ = serving;
    if (serving) {
      calls_->Begin();
    } else {
      calls_->End();
    }
  }

  // The next message and its response, fresh on the reset arena: the
  // previous step's reply has been written (or there was none).
  void StartNextRead() {
    arena_.Reset();
    request_ = google::protobuf::Arena::CreateMessage<v1::StepRequest>(&arena_);
    response_ =
        google::protobuf::Arena::CreateMessage<v1::StepResponse>(&arena_);
    StartRead(request_);
  }

  // Fills *response_ for *request_. A message refused as a whole carries the
  // refusal in error_code/error_message and no results.
  void RunStep() {
    absl::Time start = absl::Now();
    const v1::StepRequest& request = *request_;
    v1::StepResponse& response = *response_;
    // The stream belongs to one live session: the first it names that the
    // daemon knows. Until then (a first message naming a session a restart
    // forgot), and again once that session is gone (a step refused
    // NOT_FOUND), the next message's session may bind it, so a client that
    // re-attaches keeps its stream.
    if (!bound_) session_id_ = request.session_id();
    ++steps_;
    absl::Status status;
    if (request.session_id() != session_id_) {
      status = absl::InvalidArgumentError(
          absl::StrCat("StepStream: message names session \"",
                       absl::CHexEscape(request.session_id()),
                       "\" but the stream belongs to session \"",
                       absl::CHexEscape(session_id_), "\"; open a new stream"));
    } else {
      status = cache_->Step(request, &response, caller_);
      if (status.ok()) {
        bound_ = true;
      } else if (absl::IsNotFound(status)) {
        bound_ = false;
      }
    }
    if (!status.ok()) {
      response.clear_results();
      response.clear_packed_results();
      response.set_error_code(ToWireCode(status));
      response.set_error_message(std::string(status.message()));
    }
    response.set_epoch(cache_->epoch());
    Observe(observer_, RpcMethod::kStepStream, status, start);
    if (log::Verbosity() >= 1) {
      LOG_DEBUG("rpc StepStream peer=%s session=%s ops=%d -> %s (%dus)", peer_,
                request.session_id(), OperationCount(request),
                status.ok() ? "OK" : status.ToString(),
                absl::ToInt64Microseconds(absl::Now() - start));
    }
  }

  StateCache* const cache_;
  RpcObserver* const observer_;
  CallTracker* const calls_;
  const std::string peer_;
  // The stream's credentials: one connection's, for every message.
  const Peer caller_;
  bool serving_ = false;  // a step read and not yet answered
  std::string session_id_;
  bool bound_ = false;  // session_id_ named a live session at its last step
  int64_t steps_ = 0;
  // One message in flight at a time (read, step, write), so one arena
  // serves them all: each message and its response live on it until the
  // reply is written, and it is reset for the next read. Parsing a step's
  // operations and building its results then take no heap allocation once
  // the arena's first block is big enough (a heap-allocated request reused
  // across messages still freed and re-made every oneof sub-message).
  google::protobuf::Arena arena_{MessageArenaOptions()};
  v1::StepRequest* request_ = nullptr;
  v1::StepResponse* response_ = nullptr;
};

// ------------------------------------------------------------ Resize

// One Resize call. Two things may end it: StateCache's done callback (the
// resize finished) and gRPC's cancellation (client deadline, or the server's
// shutdown deadline). Whichever comes first finishes the call; the other does
// nothing. StateCache may run the callback after the call is gone (from a
// later Tick, or ~StateCache), so the callback reaches the reactor only
// through `Shared`, and only while the call is unfinished.
class ResizeReactor final : public grpc::ServerUnaryReactor {
 public:
  ResizeReactor(grpc::CallbackServerContext* context,
                v1::ResizeResponse* response, RpcObserver* observer,
                CallTracker* calls, Peer caller)
      : caller_(std::move(caller)),
        observer_(observer),
        calls_(calls),
        shared_(std::make_shared<Shared>()),
        response_(response),
        peer_(context->peer()),
        start_(absl::Now()) {
    // A shutdown waits (up to its grace) for the resize's answer.
    if (calls_ != nullptr) calls_->Begin();
  }

  // Starts the resize. May finish the call before it returns.
  void Start(StateCache& cache, const v1::ResizeRequest& request) {
    LOG_INFO("resize to %d slots requested by %s (deadline_ms=%d)",
             request.target_slots(), peer_, request.deadline_ms());
    // The outcome is logged even when the call is gone; only `shared` and
    // copies are touched before TakeFinish says the call is still ours.
    cache.Resize(
        request,
        [shared = shared_, start = start_, this](
            absl::Status status, const v1::ResizeResponse& result) {
          if (status.ok()) {
            LOG_INFO("resize done: %d slots, %d relocated, %d evicted (%dms)",
                     result.num_slots(), result.relocated(), result.evicted(),
                     absl::ToInt64Milliseconds(absl::Now() - start));
          } else {
            LOG_INFO("resize failed: %s", status.ToString());
          }
          if (!shared->TakeFinish()) return;  // cancelled first: `this` is gone
          *response_ = result;
          Observe(observer_, RpcMethod::kResize, status, start);
          Finish(ToGrpcStatus(status));
        },
        caller_);
  }

  void OnCancel() override {
    std::shared_ptr<Shared> shared = shared_;
    if (!shared->TakeFinish()) return;
    LOG_INFO("resize call from %s cancelled (the resize itself goes on)",
             peer_);
    Observe(observer_, RpcMethod::kResize, absl::CancelledError(), start_);
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "Resize call cancelled"));
  }

  void OnDone() override {
    if (calls_ != nullptr) calls_->End();
    delete this;
  }

 private:
  struct Shared {
    // True for exactly one caller: the one that finishes the call.
    bool TakeFinish() ABSL_LOCKS_EXCLUDED(mu) {
      absl::MutexLock lock(&mu);
      if (finished) return false;
      finished = true;
      return true;
    }
    absl::Mutex mu;
    bool finished ABSL_GUARDED_BY(mu) = false;
  };

  const Peer caller_;
  RpcObserver* const observer_;
  CallTracker* const calls_;
  const std::shared_ptr<Shared> shared_;
  v1::ResizeResponse* const response_;
  const std::string peer_;
  const absl::Time start_;
};

}  // namespace

// ================================================================ scheduler

StateCacheGrpcService::StateCacheGrpcService(StateCache* cache,
                                             SessionEventLog* events,
                                             RpcObserver* observer,
                                             CallTracker* calls,
                                             const PeerTable* peers)
    : cache_(cache),
      events_(events),
      observer_(observer),
      calls_(calls),
      peers_(peers) {}

grpc::ServerUnaryReactor* StateCacheGrpcService::Attach(
    grpc::CallbackServerContext* context, const v1::AttachRequest* request,
    v1::AttachResponse* response) {
  absl::Time start = absl::Now();
  const Peer caller = ResolvePeer(*context, peers_);
  absl::Status status = cache_->Attach(*request, response, caller);
  if (status.ok()) {
    events_->Attached(response->session_id(), response->handle(),
                      request->client_name(),
                      absl::StrCat(context->peer(), " ", caller.Describe()));
  } else {
    LOG_INFO("attach refused: client=\"%s\" peer=%s %s: %s",
             absl::CHexEscape(request->client_name()), context->peer(),
             caller.Describe(), status.ToString());
  }
  LogCall("Attach", context, start, status);
  return FinishUnary(context, status, observer_, RpcMethod::kAttach, start);
}

grpc::ServerUnaryReactor* StateCacheGrpcService::Detach(
    grpc::CallbackServerContext* context, const v1::DetachRequest* request,
    v1::DetachResponse* response) {
  absl::Time start = absl::Now();
  absl::Status status =
      cache_->Detach(*request, response, ResolvePeer(*context, peers_));
  if (status.ok()) {
    events_->Ended(request->session_id(), "detached",
                   response->requests_released());
  }
  LogCall("Detach", context, start, status,
          absl::StrCat("session=", request->session_id()));
  return FinishUnary(context, status, observer_, RpcMethod::kDetach, start);
}

grpc::ServerUnaryReactor* StateCacheGrpcService::KeepAlive(
    grpc::CallbackServerContext* context, const v1::KeepAliveRequest* request,
    v1::KeepAliveResponse* response) {
  absl::Time start = absl::Now();
  absl::Status status =
      cache_->KeepAlive(*request, response, ResolvePeer(*context, peers_));
  LogCall("KeepAlive", context, start, status,
          absl::StrCat("session=", request->session_id()));
  return FinishUnary(context, status, observer_, RpcMethod::kKeepAlive, start);
}

grpc::ServerUnaryReactor* StateCacheGrpcService::Step(
    grpc::CallbackServerContext* context, const v1::StepRequest* request,
    v1::StepResponse* response) {
  absl::Time start = absl::Now();
  absl::Status status =
      cache_->Step(*request, response, ResolvePeer(*context, peers_));
  if (log::Verbosity() >= 1) {
    LogCall("Step", context, start, status,
            absl::StrCat("session=", request->session_id(),
                         " ops=", OperationCount(*request)));
  }
  return FinishUnary(context, status, observer_, RpcMethod::kStep, start);
}

grpc::ServerBidiReactor<v1::StepRequest, v1::StepResponse>*
StateCacheGrpcService::StepStream(grpc::CallbackServerContext* context) {
  return new StepStreamReactor(cache_, observer_, calls_, context->peer(),
                               ResolvePeer(*context, peers_));
}

grpc::ServerUnaryReactor* StateCacheGrpcService::Ping(
    grpc::CallbackServerContext* context, const v1::PingRequest* request,
    v1::PingResponse* response) {
  const absl::Time start = absl::Now();
  return FinishUnary(context, absl::OkStatus(), observer_, RpcMethod::kPing,
                     start);
}

grpc::ServerUnaryReactor* StateCacheGrpcService::OpenStepChannel(
    grpc::CallbackServerContext* context,
    const v1::OpenStepChannelRequest* request,
    v1::OpenStepChannelResponse* response) {
  const absl::Time start = absl::Now();
  const absl::Status status =
      channels_ == nullptr
          ? absl::FailedPreconditionError(
                "this server has no step channels: use Step")
          : channels_->Open(*request, response, ResolvePeer(*context, peers_));
  if (log::Verbosity() >= 1) {
    LogCall("OpenStepChannel", context, start, status,
            absl::StrCat("session=", request->session_id()));
  }
  return FinishUnary(context, status, observer_, RpcMethod::kOpenStepChannel,
                     start);
}

// ================================================================ operator

StateCacheAdminGrpcService::StateCacheAdminGrpcService(StateCache* cache,
                                                       SessionEventLog* events,
                                                       RpcObserver* observer,
                                                       CallTracker* calls,
                                                       const PeerTable* peers)
    : cache_(cache),
      events_(events),
      observer_(observer),
      calls_(calls),
      peers_(peers) {}

grpc::ServerUnaryReactor* StateCacheAdminGrpcService::GetStats(
    grpc::CallbackServerContext* context, const v1::GetStatsRequest* request,
    v1::GetStatsResponse* response) {
  absl::Time start = absl::Now();
  cache_->GetStats(response);
  LogCall("GetStats", context, start, absl::OkStatus());
  return FinishUnary(context, absl::OkStatus(), observer_, RpcMethod::kGetStats,
                     start);
}

grpc::ServerUnaryReactor* StateCacheAdminGrpcService::ListSessions(
    grpc::CallbackServerContext* context,
    const v1::ListSessionsRequest* request,
    v1::ListSessionsResponse* response) {
  absl::Time start = absl::Now();
  const absl::Status status =
      cache_->ListSessions(*request, response, ResolvePeer(*context, peers_));
  LogCall("ListSessions", context, start, status);
  return FinishUnary(context, status, observer_, RpcMethod::kListSessions,
                     start);
}

grpc::ServerUnaryReactor* StateCacheAdminGrpcService::Resize(
    grpc::CallbackServerContext* context, const v1::ResizeRequest* request,
    v1::ResizeResponse* response) {
  auto* reactor = new ResizeReactor(context, response, observer_, calls_,
                                    ResolvePeer(*context, peers_));
  reactor->Start(*cache_, *request);
  return reactor;
}

grpc::ServerUnaryReactor* StateCacheAdminGrpcService::EvictSession(
    grpc::CallbackServerContext* context,
    const v1::EvictSessionRequest* request,
    v1::EvictSessionResponse* response) {
  absl::Time start = absl::Now();
  const Peer caller = ResolvePeer(*context, peers_);
  absl::Status status = cache_->EvictSession(*request, response, caller);
  // Named as the operator named it: by handle, or by the id they hold.
  const std::string& named =
      request->handle().empty() ? request->session_id() : request->handle();
  if (status.ok()) {
    LOG_INFO("session %s evicted by %s: requests_released=%d", named,
             caller.Describe(), response->requests_released());
  } else if (absl::IsPermissionDenied(status)) {
    LOG_WARNING("%s", status.ToString());
  }
  LogCall("EvictSession", context, start, status,
          absl::StrCat("session=", named));
  return FinishUnary(context, status, observer_, RpcMethod::kEvictSession,
                     start);
}

grpc::ServerUnaryReactor* StateCacheAdminGrpcService::Drain(
    grpc::CallbackServerContext* context, const v1::DrainRequest* request,
    v1::DrainResponse* response) {
  absl::Time start = absl::Now();
  const Peer caller = ResolvePeer(*context, peers_);
  const absl::Status status = cache_->Drain(*request, response, caller);
  if (status.ok()) {
    LOG_INFO("%s by %s: %d requests still admitted",
             response->draining() ? "draining" : "admitting again",
             caller.Describe(), response->requests());
  } else {
    LOG_WARNING("%s", status.ToString());
  }
  return FinishUnary(context, status, observer_, RpcMethod::kDrain, start);
}

const char* RpcMethodName(RpcMethod method) {
  switch (method) {
    case RpcMethod::kAttach:
      return "Attach";
    case RpcMethod::kDetach:
      return "Detach";
    case RpcMethod::kKeepAlive:
      return "KeepAlive";
    case RpcMethod::kStep:
      return "Step";
    case RpcMethod::kStepStream:
      return "StepStream";
    case RpcMethod::kPing:
      return "Ping";
    case RpcMethod::kOpenStepChannel:
      return "OpenStepChannel";
    case RpcMethod::kStepChannel:
      return "StepChannel";
    case RpcMethod::kGetStats:
      return "GetStats";
    case RpcMethod::kListSessions:
      return "ListSessions";
    case RpcMethod::kResize:
      return "Resize";
    case RpcMethod::kEvictSession:
      return "EvictSession";
    case RpcMethod::kDrain:
      return "Drain";
    case RpcMethod::kCount:
      break;
  }
  return "unknown";
}

}  // namespace statecache
