// The round trips more than one RPC benchmark times: Ping, and unary and
// streamed Steps of a scheduler's passes.
#ifndef STATECACHE_BENCH_RPC_TRIPS_H_
#define STATECACHE_BENCH_RPC_TRIPS_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "bench/rpc/passes.h"
#include "bench/rpc/timing.h"
#include "client/statecache_client.h"
#include "proto/statecache/v1/statecache.grpc.pb.h"

namespace statecache::bench {

// The field of PingRequest (unknown to it) that asks rpc_calibrate's bare
// server's handler to busy-wait that many nanoseconds.
inline constexpr int kBusyNanosField = 1000;

// How a row's client builds its passes: StepRequests in either form, or
// the client library's StepBuilder.
enum class PassForm { kList, kPacked, kBuilder };

// Ping. With `pass_ops` > 0, Prepare builds (and drops) a pass of that many
// operations in `form`, as the Step row it is paired with does before each
// call, so that the Ping comes after the same client work. With
// `busy_nanos` > 0 (rpc_calibrate's server only), the handler busy-waits
// that long.
class PingTrip final : public RoundTrip {
 public:
  explicit PingTrip(v1::StateCache::Stub& stub, int pass_ops = 0,
                    PassForm form = PassForm::kList, int64_t busy_nanos = 0);
  void Prepare() override;
  void Call() override;

 private:
  v1::StateCache::Stub& stub_;
  const PassForm form_;
  v1::PingRequest req_;
  std::unique_ptr<Scheduler> shadow_;
  v1::StepRequest dropped_;
  StepBuilder dropped_builder_;
};

// Fills the scheduler's running batch with 50 unary passes, untimed.
void FillBatch(v1::StateCache::Stub& stub, Scheduler& sched);

// Unary Steps of `ops` operations (seed 7: the passes the in-process rows
// run). With `refused`, the same passes each refused whole for an unknown
// session id: the daemon parses the request, finds no session and answers
// NOT_FOUND, so no operation runs. That is what carrying a pass's request
// costs by itself (the client's serialisation, the socket, gRPC, the
// daemon's parsing), plus gRPC's error path, to set against the full Step.
class UnaryStepTrip final : public RoundTrip {
 public:
  UnaryStepTrip(v1::StateCache::Stub& stub, int ops, bool refused = false,
                bool packed = false);
  ~UnaryStepTrip() override;
  void Prepare() override;
  void Call() override;

 private:
  v1::StateCache::Stub& stub_;
  const bool refused_;
  const bool packed_;
  Scheduler sched_;
  v1::StepRequest req_;
  // Reused, as a scheduler would: parsing into it reuses its sub-messages.
  v1::StepResponse resp_;
};

// The same passes over one StepStream (seed 11).
class StreamStepTrip final : public RoundTrip {
 public:
  StreamStepTrip(v1::StateCache::Stub& stub, int ops, bool packed = false);
  ~StreamStepTrip() override;
  void Prepare() override;
  void Call() override;

 private:
  v1::StateCache::Stub& stub_;
  const bool packed_;
  Scheduler sched_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::StepRequest, v1::StepResponse>>
      stream_;
  v1::StepRequest req_;
  v1::StepResponse resp_;
};

// The same passes (seed 7) through statecache::Client (Step or
// StepStreamed) attached with `transport`: what a C++ scheduler using the
// client library sees, results converted included. Exits 1 when the
// session does not get the transport asked for.
class ClientStepTrip final : public RoundTrip {
 public:
  ClientStepTrip(const std::string& address, int ops, bool streamed,
                 AttachOptions::Transport transport);
  ~ClientStepTrip() override;
  void Prepare() override;
  void Call() override;

 private:
  absl::StatusOr<StepResults> Step(const StepBuilder& b);
  const bool streamed_;
  Scheduler sched_;
  std::unique_ptr<Client> client_;
  StepBuilder builder_;
};

// The step channel's bare round trip (Client::PingChannel: an empty
// request and reply through shared memory), on a session of its own.
class ChannelPingTrip final : public RoundTrip {
 public:
  explicit ChannelPingTrip(const std::string& address);
  ~ChannelPingTrip() override;
  void Call() override;

 private:
  std::unique_ptr<Client> client_;
};

}  // namespace statecache::bench

#endif  // STATECACHE_BENCH_RPC_TRIPS_H_
