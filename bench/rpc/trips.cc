#include "bench/rpc/trips.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

namespace statecache::bench {

PingTrip::PingTrip(v1::StateCache::Stub& stub, int pass_ops, PassForm form,
                   int64_t busy_nanos)
    : stub_(stub), form_(form) {
  if (busy_nanos > 0) {
    req_.GetReflection()->MutableUnknownFields(&req_)->AddVarint(
        kBusyNanosField, static_cast<uint64_t>(busy_nanos));
  }
  if (pass_ops > 0) {
    shadow_ = std::make_unique<Scheduler>("unused", pass_ops, 13);
    for (int i = 0; i < 50; ++i) (void)shadow_->NextPass();  // full batch
  }
}

void PingTrip::Prepare() {
  if (shadow_ == nullptr) return;
  if (form_ == PassForm::kBuilder) {
    dropped_builder_ = shadow_->NextBuilder();
  } else {
    dropped_ = shadow_->NextPass(form_ == PassForm::kPacked);
  }
}

void PingTrip::Call() {
  grpc::ClientContext ctx;
  v1::PingResponse resp;
  if (!stub_.Ping(&ctx, req_, &resp).ok()) std::exit(1);
}

void FillBatch(v1::StateCache::Stub& stub, Scheduler& sched) {
  for (int i = 0; i < 50; ++i) {
    grpc::ClientContext ctx;
    v1::StepResponse resp;
    (void)stub.Step(&ctx, sched.NextPass(), &resp);
  }
}

UnaryStepTrip::UnaryStepTrip(v1::StateCache::Stub& stub, int ops, bool refused,
                             bool packed)
    : stub_(stub),
      refused_(refused),
      packed_(packed),
      sched_(Attach(stub), ops, 7) {
  FillBatch(stub_, sched_);
}

UnaryStepTrip::~UnaryStepTrip() { Detach(stub_, sched_.session()); }

void UnaryStepTrip::Prepare() {
  req_ = sched_.NextPass(packed_);
  if (refused_) req_.set_session_id("no-such-session");
  resp_.Clear();
}

void UnaryStepTrip::Call() {
  grpc::ClientContext ctx;
  grpc::Status s = stub_.Step(&ctx, req_, &resp_);
  const grpc::StatusCode want =
      refused_ ? grpc::StatusCode::NOT_FOUND : grpc::StatusCode::OK;
  if (s.error_code() != want) {
    std::fprintf(stderr, "step: expected code %d, got %d %s\n", want,
                 s.error_code(), s.error_message().c_str());
    std::exit(1);
  }
  if (!refused_) CheckStep(resp_);
}

StreamStepTrip::StreamStepTrip(v1::StateCache::Stub& stub, int ops, bool packed)
    : stub_(stub), packed_(packed), sched_(Attach(stub), ops, 11) {
  stream_ = stub_.StepStream(&ctx_);
  for (int i = 0; i < 50; ++i) {  // fill the running batch, untimed
    if (!stream_->Write(sched_.NextPass()) || !stream_->Read(&resp_)) {
      std::exit(1);
    }
  }
}

StreamStepTrip::~StreamStepTrip() {
  stream_->WritesDone();
  (void)stream_->Finish();
  Detach(stub_, sched_.session());
}

void StreamStepTrip::Prepare() { req_ = sched_.NextPass(packed_); }

void StreamStepTrip::Call() {
  if (!stream_->Write(req_) || !stream_->Read(&resp_)) {
    std::fprintf(stderr, "stream broke\n");
    std::exit(1);
  }
  CheckStep(resp_);
}

namespace {

std::unique_ptr<Client> AttachedClient(const std::string& address,
                                       AttachOptions::Transport transport) {
  auto client = Client::Connect(address, ClientOptions{.keepalive = false});
  if (!client.ok()) std::exit(1);
  ModelIdentity identity;
  identity.model_id = "bench";
  identity.hash_block_size = kBlock;
  auto session =
      (*client)->Attach(identity, "rpc_bench", {.transport = transport});
  if (!session.ok()) {
    std::fprintf(stderr, "attach: %s\n", session.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(client);
}

}  // namespace

ClientStepTrip::ClientStepTrip(const std::string& address, int ops,
                               bool streamed,
                               AttachOptions::Transport transport)
    : streamed_(streamed),
      sched_("unused", ops, 7),  // the client names the session
      client_(AttachedClient(address, transport)) {
  for (int i = 0; i < 50; ++i) (void)Step(sched_.NextBuilder());
}

ClientStepTrip::~ClientStepTrip() { (void)client_->Detach(); }

void ClientStepTrip::Prepare() { builder_ = sched_.NextBuilder(); }

void ClientStepTrip::Call() {
  absl::StatusOr<StepResults> results = Step(builder_);
  if (!results.ok()) {
    std::fprintf(stderr, "client step: %s\n",
                 results.status().ToString().c_str());
    std::exit(1);
  }
}

absl::StatusOr<StepResults> ClientStepTrip::Step(const StepBuilder& b) {
  return streamed_ ? client_->StepStreamed(b) : client_->Step(b);
}

ChannelPingTrip::ChannelPingTrip(const std::string& address)
    : client_(AttachedClient(address, AttachOptions::Transport::kChannel)) {}

ChannelPingTrip::~ChannelPingTrip() { (void)client_->Detach(); }

void ChannelPingTrip::Call() {
  if (absl::Status st = client_->PingChannel(); !st.ok()) {
    std::fprintf(stderr, "channel ping: %s\n", st.ToString().c_str());
    std::exit(1);
  }
}

}  // namespace statecache::bench
