// The gRPC adapter (daemon/grpc/grpc_service.h) and the C++ client
// (client/statecache_client.h) together, in one process: a real gRPC server
// on loopback over a StateCache with a fake clock, so lease expiry needs no
// sleeping. What is tested here is the translation (statuses, per-message
// stream errors, the deferred Resize), not the pool's decisions (those are
// tests/service and tests/parity).
#include "daemon/grpc/grpc_service.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/statecache_client.h"
#include "daemon/grpc/session_event_log.h"
#include "daemon/service/state_cache.h"
#include "gtest/gtest.h"
#include "proto/statecache/v1/statecache.grpc.pb.h"
#include "proto/status_mapping.h"
#include "tests/service/fake_clock.h"
#include "tests/service/random_operations.h"

namespace statecache {
namespace {

constexpr int64_t kBlockSize = 64;

ModelIdentity TestIdentity() {
  return ModelIdentity{.model_id = "test-model",
                       .hash_block_size = kBlockSize,
                       .hash_namespace = "ns",
                       .num_spec = 0};
}

class GrpcServiceTest : public ::testing::Test {
 protected:
  // Starts a server over a fresh StateCache with `num_slots` slots.
  void StartServer(int64_t num_slots = 16) {
    StateCacheOptions options;
    options.identity.set_model_id("test-model");
    options.identity.set_hash_block_size(kBlockSize);
    options.identity.set_hash_namespace("ns");
    options.num_slots = num_slots;
    options.transfer = *StateTransfer::Create(TransferKind::kFork, 1, true);
    options.lease_ttl = absl::Seconds(10);
    options.clock = &clock_;
    auto cache = StateCache::Create(options);
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = *std::move(cache);
    cache_->AddObserver(&events_);
    service_ = std::make_unique<StateCacheGrpcService>(cache_.get(), &events_);
    admin_service_ =
        std::make_unique<StateCacheAdminGrpcService>(cache_.get(), &events_);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service_.get());
    builder.RegisterService(admin_service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port, 0);
    address_ = "127.0.0.1:" + std::to_string(port);
    channel_ =
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
    stub_ = v1::StateCache::NewStub(channel_);
    admin_stub_ = v1::StateCacheAdmin::NewStub(channel_);
  }

  // A session attached through the generated stub (the test identity).
  v1::AttachResponse AttachRaw() {
    v1::AttachRequest attach;
    attach.mutable_identity()->set_model_id("test-model");
    attach.mutable_identity()->set_hash_block_size(kBlockSize);
    attach.mutable_identity()->set_hash_namespace("ns");
    v1::AttachResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(stub_->Attach(&context, attach, &response).ok());
    return response;
  }

  // A 4-slot server whose every slot request "r" of the returned scheduler
  // holds, so a shrink has to wait for its release.
  std::unique_ptr<Client> StartFullServer() {
    StartServer(4);
    std::unique_ptr<Client> scheduler = Connect();
    EXPECT_TRUE(scheduler->Attach(TestIdentity(), "sched").ok());
    StepBuilder admit;
    admit.Admit("r", 4, 10, 10, {}, 0);
    EXPECT_TRUE(scheduler->Step(admit).ok());
    return scheduler;
  }

  std::unique_ptr<Client> Connect(ClientOptions options = {}) {
    auto client = Client::Connect(address_, options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  void TearDown() override {
    stub_.reset();
    admin_stub_.reset();
    channel_.reset();
    if (server_ != nullptr) {
      server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    }
    server_.reset();
    cache_.reset();
  }

  FakeClock clock_;
  SessionEventLog events_;
  std::unique_ptr<StateCache> cache_;
  std::unique_ptr<StateCacheGrpcService> service_;
  std::unique_ptr<StateCacheAdminGrpcService> admin_service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::StateCache::Stub> stub_;
  std::unique_ptr<v1::StateCacheAdmin::Stub> admin_stub_;
};

// ------------------------------------------------------------ ToGrpcStatus

TEST(ToGrpcStatusTest, KeepsCodeAndMessage) {
  for (int code = 0; code <= 16; ++code) {
    absl::Status status(static_cast<absl::StatusCode>(code), "why");
    grpc::Status mapped = ToGrpcStatus(status);
    EXPECT_EQ(static_cast<int>(mapped.error_code()), code);
    EXPECT_EQ(mapped.error_message(), code == 0 ? "" : "why");
  }
  EXPECT_EQ(ToGrpcStatus(absl::Status(static_cast<absl::StatusCode>(99), "x"))
                .error_code(),
            grpc::StatusCode::UNKNOWN);
}

// ------------------------------------------------------------ sessions

TEST_F(GrpcServiceTest, AttachStepDetach) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_TRUE(client->Ping().ok());

  auto session = client->Attach(TestIdentity(), "test");
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ(session->epoch, cache_->epoch());
  EXPECT_EQ(session->lease_ttl, absl::Seconds(10));
  EXPECT_EQ(session->num_slots, 16);
  EXPECT_EQ(session->transfer.kind, "fork");
  EXPECT_FALSE(client->lease_lost());

  const std::vector<int64_t> hashes = {101, 102};
  StepBuilder step;
  step.BeginPass()
      .Admit("r1", 1, 128, 128, hashes, 0)
      .Lookup(101)
      .Release("unknown")
      .Admit("r1", 1, 128, 128, hashes, 0);
  ASSERT_EQ(step.size(), 5u);
  auto results = client->Step(step);
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->results.size(), 5u);
  EXPECT_EQ(results->epoch, cache_->epoch());
  EXPECT_TRUE(results->Get<BeginPassResult>(0).ok());
  auto admit = results->Get<AdmitResult>(1);
  ASSERT_TRUE(admit.ok()) << admit.status();
  EXPECT_EQ(admit->slots.size(), 1u);
  EXPECT_EQ(admit->fork_src, -1);
  EXPECT_EQ(admit->blocks_resumed, 0);
  EXPECT_EQ(results->Get<LookupResult>(2)->slot, -1);
  // A refused operation carries its code; later operations still ran.
  EXPECT_TRUE(absl::IsNotFound(results->Get<ReleaseResult>(3).status()));
  EXPECT_TRUE(absl::IsAlreadyExists(results->Get<AdmitResult>(4).status()));
  // Typed access checks the kind and the index.
  EXPECT_TRUE(absl::IsInvalidArgument(results->Get<AdmitResult>(2).status()));
  EXPECT_TRUE(absl::IsOutOfRange(results->Get<AdmitResult>(5).status()));

  auto released = client->Detach();
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(*released, 1);
  EXPECT_TRUE(absl::IsFailedPrecondition(client->Step(step).status()));
}

TEST_F(GrpcServiceTest, IdentityMismatchIsFailedPrecondition) {
  StartServer();
  auto client = Connect();
  ModelIdentity other = TestIdentity();
  other.hash_block_size = 32;
  auto session = client->Attach(other, "wrong");
  EXPECT_TRUE(absl::IsFailedPrecondition(session.status())) << session.status();
  EXPECT_FALSE(client->session().has_value());
}

TEST_F(GrpcServiceTest, SecondAttachOnOneClientIsRefused) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(client->Attach(TestIdentity(), "a").ok());
  EXPECT_TRUE(
      absl::IsFailedPrecondition(client->Attach(TestIdentity(), "b").status()));
}

TEST_F(GrpcServiceTest, LapsedLeaseIsReportedAndReattachWorks) {
  StartServer();
  ClientOptions options;
  options.keepalive = false;
  auto client = Connect(options);
  ASSERT_TRUE(client->Attach(TestIdentity(), "lapsing").ok());
  StepBuilder step;
  step.Admit("r", 1, 10, 10, {}, 0);
  ASSERT_TRUE(client->StepStreamed(step).ok());

  clock_.Advance(absl::Seconds(11));
  cache_->Tick();
  auto refused = client->Step(step);
  EXPECT_TRUE(absl::IsNotFound(refused.status())) << refused.status();
  EXPECT_TRUE(client->lease_lost());
  // The open stream reports it too, as a per-message error.
  EXPECT_TRUE(absl::IsNotFound(client->StepStreamed(step).status()));

  // Re-attaching replaces the session; the stream is reopened for it.
  auto again = client->Attach(TestIdentity(), "lapsing");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(client->lease_lost());
  auto results = client->StepStreamed(step);
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_TRUE(results->Get<AdmitResult>(0).ok());
}

TEST_F(GrpcServiceTest, StepStreamedAnswersInOrder) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(client->Attach(TestIdentity(), "stream").ok());
  for (int i = 0; i < 20; ++i) {
    StepBuilder step;
    const std::string id = "r" + std::to_string(i);
    step.BeginPass().Admit(id, 1, 10, 10, {}, 0).Release(id).Lookup(i);
    auto results = client->StepStreamed(step);
    ASSERT_TRUE(results.ok()) << results.status();
    ASSERT_EQ(results->results.size(), 4u);
    auto released = results->Get<ReleaseResult>(2);
    ASSERT_TRUE(released.ok()) << released.status();
    EXPECT_EQ(released->slots_released, 1);
  }
}

// Step and StepStreamed send the builder's own operations (no copy): the
// builder must come back unchanged, ready to be sent again, and one const
// builder may be sent from several threads at once.
TEST_F(GrpcServiceTest, StepLeavesItsBuilderIntactForReuse) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(client->Attach(TestIdentity(), "reuse").ok());
  const std::vector<int64_t> hashes = {101, 102, 103};
  StepBuilder admit;
  admit.Admit("r1", 1, 256, 0, hashes, 0);
  ASSERT_TRUE(client->Step(admit).ok());
  // Queries only, so every send has the same answers.
  StepBuilder queries;
  queries.Lookup(101).ResumableHit(256, hashes, 3).Lookup(7);
  auto check = [](const absl::StatusOr<StepResults>& results) {
    ASSERT_TRUE(results.ok()) << results.status();
    ASSERT_EQ(results->results.size(), 3u);
    EXPECT_EQ(results->Get<LookupResult>(0)->slot, -1);
    EXPECT_EQ(results->Get<ResumableHitResult>(1)->blocks, 0);
    EXPECT_EQ(results->Get<LookupResult>(2)->slot, -1);
  };
  for (int i = 0; i < 3; ++i) {
    check(client->Step(queries));
    check(client->StepStreamed(queries));
  }
  EXPECT_EQ(queries.size(), 3u);
  const StepBuilder& shared = queries;
  std::vector<std::thread> senders;
  for (int t = 0; t < 4; ++t) {
    senders.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        check(t % 2 ? client->Step(shared) : client->StepStreamed(shared));
      }
    });
  }
  for (std::thread& t : senders) t.join();
  EXPECT_EQ(queries.size(), 3u);
  // The admission's builder too: sending it again is a duplicate admission
  // (the daemon saw the same operation), not an empty step.
  auto again = client->Step(admit);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->results.size(), 1u);
  EXPECT_TRUE(absl::IsAlreadyExists(again->Get<AdmitResult>(0).status()));
}

// The wire contract of StepStream, with the generated stub.
TEST_F(GrpcServiceTest, StepStreamRefusesMessagesAndStaysOpen) {
  StartServer();
  const v1::AttachResponse first = AttachRaw();
  const v1::AttachResponse second = AttachRaw();

  grpc::ClientContext context;
  auto stream = stub_->StepStream(&context);
  v1::StepRequest request;
  v1::StepResponse response;

  request.set_session_id(first.session_id());
  request.add_operations()->mutable_begin_pass();
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.error_code(), 0);
  EXPECT_EQ(response.results_size(), 1);
  EXPECT_EQ(response.epoch(), cache_->epoch());

  // Another session on this stream: refused, stream stays open.
  request.set_session_id(second.session_id());
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.error_code(),
            static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(response.error_message().empty());
  EXPECT_EQ(response.results_size(), 0);

  // A whole-step refusal from the core (an operation with no kind).
  request.set_session_id(first.session_id());
  request.clear_operations();
  request.add_operations();
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.error_code(),
            static_cast<int>(absl::StatusCode::kInvalidArgument));

  // A malformed packed step (a lookup with no hash): refused whole, no
  // packed results either.
  request.clear_operations();
  request.mutable_packed()->add_kinds(v1::Operation::kLookup);
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.error_code(),
            static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(response.error_message().find("hashes is too short"),
            std::string::npos)
      << response.error_message();
  EXPECT_FALSE(response.has_packed_results());

  // Still serving, in either form.
  request.mutable_packed()->add_hashes(5);
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.error_code(), 0);
  ASSERT_EQ(response.packed_results().codes_size(), 1);
  ASSERT_EQ(response.packed_results().values_size(), 1);
  EXPECT_EQ(response.packed_results().values(0), -1);
  request.clear_packed();
  request.add_operations()->mutable_lookup()->set_hash(5);
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.error_code(), 0);
  ASSERT_EQ(response.results_size(), 1);
  EXPECT_EQ(response.results(0).lookup().slot(), -1);

  ASSERT_TRUE(stream->WritesDone());
  EXPECT_FALSE(stream->Read(&response));
  grpc::Status status = stream->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
}

// A stream binds to the first live session it names. A client whose first
// message names a session the daemon does not know (one from before a
// restart) gets NOT_FOUND and may name its new session on the same stream;
// once bound, another session is refused; once the bound session is gone
// (NOT_FOUND), a new one binds it.
TEST_F(GrpcServiceTest, StepStreamBindsToTheFirstLiveSessionItNames) {
  StartServer();
  const v1::AttachResponse first = AttachRaw();
  const v1::AttachResponse second = AttachRaw();
  grpc::ClientContext context;
  auto stream = stub_->StepStream(&context);
  v1::StepRequest request;
  request.add_operations()->mutable_begin_pass();
  v1::StepResponse response;
  auto send = [&](const std::string& session_id) {
    request.set_session_id(session_id);
    EXPECT_TRUE(stream->Write(request));
    EXPECT_TRUE(stream->Read(&response));
    return response.error_code();
  };
  constexpr int kOk = 0;
  constexpr int kNotFound = static_cast<int>(absl::StatusCode::kNotFound);
  constexpr int kInvalid = static_cast<int>(absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(send("stale-session"), kNotFound);
  EXPECT_EQ(response.epoch(), cache_->epoch());  // how a client learns it
  EXPECT_EQ(send(first.session_id()), kOk) << response.error_message();
  EXPECT_EQ(send(second.session_id()), kInvalid);
  EXPECT_NE(response.error_message().find("belongs to session"),
            std::string::npos)
      << response.error_message();
  EXPECT_EQ(send(first.session_id()), kOk);

  {
    v1::DetachRequest detach;
    detach.set_session_id(first.session_id());
    v1::DetachResponse detached;
    grpc::ClientContext detach_context;
    ASSERT_TRUE(stub_->Detach(&detach_context, detach, &detached).ok());
  }
  // Bound to a session that is gone: NOT_FOUND until the client names a
  // live one, which then binds the stream.
  EXPECT_EQ(send(first.session_id()), kNotFound);
  EXPECT_EQ(send(second.session_id()), kOk) << response.error_message();
  EXPECT_EQ(send(first.session_id()), kInvalid);

  ASSERT_TRUE(stream->WritesDone());
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(GrpcServiceTest, UnknownSessionIsNotFound) {
  StartServer();
  v1::StepRequest request;
  request.set_session_id("nope");
  v1::StepResponse response;
  grpc::ClientContext context;
  grpc::Status status = stub_->Step(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
}

// ------------------------------------------------------------ operator

TEST_F(GrpcServiceTest, StatsSessionsAndEvict) {
  StartServer(8);
  auto scheduler = Connect();
  ASSERT_TRUE(scheduler->Attach(TestIdentity(), "sched").ok());
  StepBuilder step;
  step.Admit("r", 2, 10, 10, {}, 0);
  ASSERT_TRUE(scheduler->Step(step).ok());

  auto admin = Connect();
  auto stats = admin->GetStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->epoch, cache_->epoch());
  EXPECT_EQ(stats->slots_total, 8);
  EXPECT_EQ(stats->slots_used, 2);
  EXPECT_EQ(stats->sessions, 1);
  EXPECT_EQ(stats->requests, 1);
  EXPECT_EQ(stats->identity.model_id, "test-model");
  EXPECT_EQ(stats->transfer.kind, "fork");

  auto sessions = admin->ListSessions();
  ASSERT_TRUE(sessions.ok()) << sessions.status();
  ASSERT_EQ(sessions->size(), 1u);
  EXPECT_EQ((*sessions)[0].client_name, "sched");
  EXPECT_EQ((*sessions)[0].requests, 1);
  EXPECT_EQ((*sessions)[0].handle, "s1");

  auto evicted = admin->EvictSession((*sessions)[0].handle);
  ASSERT_TRUE(evicted.ok()) << evicted.status();
  EXPECT_EQ(*evicted, 1);
  EXPECT_TRUE(absl::IsNotFound(admin->EvictSession("nope").status()));
  EXPECT_TRUE(absl::IsNotFound(scheduler->Step(step).status()));
  EXPECT_TRUE(scheduler->lease_lost());
}

TEST_F(GrpcServiceTest, ResizeGrowsAndRefusesBadTargets) {
  StartServer(8);
  auto admin = Connect();
  auto grown = admin->Resize(32);
  ASSERT_TRUE(grown.ok()) << grown.status();
  EXPECT_EQ(grown->num_slots, 32);
  EXPECT_TRUE(absl::IsInvalidArgument(admin->Resize(0).status()));
}

// A shrink blocked by live slots finishes later, from the Step that frees
// them (StateCache's callback finishes the call).
TEST_F(GrpcServiceTest, PendingShrinkFinishesWhenSlotsAreReleased) {
  auto scheduler = StartFullServer();

  auto admin = Connect();
  absl::StatusOr<ResizeResult> shrunk;
  std::thread resize([&] { shrunk = admin->Resize(2, absl::Seconds(30)); });
  // Once a no-op resize is refused as ABORTED, the shrink is pending.
  auto probe = Connect();
  absl::Status second;
  do {
    second = probe->Resize(4).status();
  } while (second.ok());
  EXPECT_TRUE(absl::IsAborted(second)) << second;

  StepBuilder release;
  release.Release("r");
  ASSERT_TRUE(scheduler->Step(release).ok());
  resize.join();
  ASSERT_TRUE(shrunk.ok()) << shrunk.status();
  EXPECT_EQ(shrunk->num_slots, 2);
}

// A Resize call that gives up (client deadline) finishes at once; the core's
// later callback must not touch the finished call.
TEST_F(GrpcServiceTest, ResizeCallCancelledBeforeTheResizeFinishes) {
  auto scheduler = StartFullServer();

  v1::ResizeRequest request;
  request.set_target_slots(2);
  request.set_deadline_ms(60'000);
  v1::ResizeResponse response;
  grpc::ClientContext context;
  context.set_deadline(
      absl::ToChronoTime(absl::Now() + absl::Milliseconds(200)));
  grpc::Status status = admin_stub_->Resize(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);

  // The resize itself carries on and completes with the release.
  StepBuilder release;
  release.Release("r");
  ASSERT_TRUE(scheduler->Step(release).ok());
  auto stats = Connect()->GetStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->slots_total, 2);
}

// Shutting the server down with a Resize pending: the call is cancelled at
// the shutdown deadline, and destroying the cache afterwards is safe.
TEST_F(GrpcServiceTest, ShutdownCancelsPendingResize) {
  auto scheduler = StartFullServer();

  auto admin = Connect();
  absl::Status resize_status;
  std::thread resize(
      [&] { resize_status = admin->Resize(2, absl::Seconds(60)).status(); });
  auto probe = Connect();
  absl::Status second;
  do {
    second = probe->Resize(4).status();
  } while (second.ok());
  ASSERT_TRUE(absl::IsAborted(second)) << second;

  server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Milliseconds(50)));
  resize.join();
  EXPECT_FALSE(resize_status.ok());
  server_.reset();
  cache_.reset();  // runs the core's callback: CANCELLED, ignored
}

// ------------------------------------------- every result kind, read back

// `op` through the client library's builder (which sends the packed form).
void AddToBuilder(StepBuilder& b, const v1::Operation& op) {
  switch (op.kind_case()) {
    case v1::Operation::kBeginPass:
      b.BeginPass();
      return;
    case v1::Operation::kAdmit: {
      const v1::Admit& a = op.admit();
      b.Admit(
          a.request_id(), a.width(), a.num_tokens(), a.anchor_pos(),
          {a.block_hashes().data(), static_cast<size_t>(a.block_hashes_size())},
          a.kv_hit_blocks());
      return;
    }
    case v1::Operation::kResumableHit: {
      const v1::ResumableHit& q = op.resumable_hit();
      b.ResumableHit(
          q.num_tokens(),
          {q.block_hashes().data(), static_cast<size_t>(q.block_hashes_size())},
          q.kv_hit_blocks(), q.assume_checkpointed());
      return;
    }
    case v1::Operation::kLookup:
      b.Lookup(op.lookup().hash());
      return;
    case v1::Operation::kReserve: {
      std::vector<MidstepPosition> positions;
      for (const auto& p : op.reserve().positions()) {
        positions.push_back({.position = p.position(), .hash = p.hash()});
      }
      b.Reserve(op.reserve().request_id(), positions);
      return;
    }
    case v1::Operation::kPublish:
      b.Publish(op.publish().request_id(), op.publish().keep_all());
      return;
    case v1::Operation::kCancel:
      b.Cancel(op.cancel().request_id());
      return;
    case v1::Operation::kCheckpoint: {
      const v1::Checkpoint& c = op.checkpoint();
      b.Checkpoint(c.request_id(), c.boundary_blocks(), c.hash(),
                   c.anchor_pos());
      return;
    }
    case v1::Operation::kConsumeFork:
      b.ConsumeFork(op.consume_fork().request_id());
      return;
    case v1::Operation::kAdoptForkSource:
      b.AdoptForkSource(op.adopt_fork_source().request_id());
      return;
    case v1::Operation::kRelease:
      b.Release(op.release().request_id());
      return;
    case v1::Operation::kUnindex:
      b.Unindex({op.unindex().hashes().data(),
                 static_cast<size_t>(op.unindex().hashes_size())});
      return;
    case v1::Operation::kClearIndex:
      b.ClearIndex();
      return;
    case v1::Operation::kCopy:
      b.Copy(op.copy().request_id(), op.copy().from_index(),
             op.copy().to_index());
      return;
    case v1::Operation::kSnapshot:
      b.Snapshot(op.snapshot().request_id(), op.snapshot().position(),
                 op.snapshot().hash());
      return;
    case v1::Operation::KIND_NOT_SET:
      break;
  }
  ADD_FAILURE() << "no kind";
}

// The client's result, written back as the list form's message.
v1::OperationResult ToProto(const absl::StatusOr<OperationResult>& r) {
  v1::OperationResult out;
  if (!r.ok()) {
    out.set_code(static_cast<int32_t>(r.status().code()));
    out.set_message(std::string(r.status().message()));
    return out;
  }
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, BeginPassResult>) {
          auto* p = out.mutable_begin_pass();
          for (const SlotMove& m : v.moves) {
            auto* pm = p->add_moves();
            pm->set_request_id(m.request_id);
            pm->set_index(m.index);
            pm->set_from_slot(m.from_slot);
            pm->set_to_slot(m.to_slot);
          }
          p->set_pins_released(v.pins_released);
        } else if constexpr (std::is_same_v<T, AdmitResult>) {
          auto* p = out.mutable_admit();
          for (int64_t slot : v.slots) p->add_slots(slot);
          p->set_fork_src(v.fork_src);
          p->set_blocks_resumed(v.blocks_resumed);
          p->set_adopted(v.adopted);
        } else if constexpr (std::is_same_v<T, ResumableHitResult>) {
          out.mutable_resumable_hit()->set_blocks(v.blocks);
        } else if constexpr (std::is_same_v<T, LookupResult>) {
          out.mutable_lookup()->set_slot(v.slot);
        } else if constexpr (std::is_same_v<T, ReserveResult>) {
          auto* p = out.mutable_reserve();
          for (const MidstepReservation& m : v.reservations) {
            auto* pm = p->add_reservations();
            pm->set_slot(m.slot);
            pm->set_position(m.position);
            pm->set_hash(m.hash);
          }
        } else if constexpr (std::is_same_v<T, PublishResult>) {
          out.mutable_publish()->set_published(v.published);
        } else if constexpr (std::is_same_v<T, CancelResult>) {
          out.mutable_cancel()->set_cancelled(v.cancelled);
        } else if constexpr (std::is_same_v<T, ForkCheckpointResult>) {
          auto* p = out.mutable_checkpoint();
          p->set_state_slot(v.state_slot);
          p->set_fork_src(v.fork_src);
          p->set_kept(v.kept);
        } else if constexpr (std::is_same_v<T, ConsumeForkResult>) {
          out.mutable_consume_fork()->set_fork_src(v.fork_src);
        } else if constexpr (std::is_same_v<T, AdoptForkSourceResult>) {
          out.mutable_adopt_fork_source()->set_state_slot(v.state_slot);
        } else if constexpr (std::is_same_v<T, ReleaseResult>) {
          out.mutable_release()->set_slots_released(v.slots_released);
        } else if constexpr (std::is_same_v<T, UnindexResult>) {
          out.mutable_unindex()->set_orphaned(v.orphaned);
        } else if constexpr (std::is_same_v<T, ClearIndexResult>) {
          out.mutable_clear_index();
        } else if constexpr (std::is_same_v<T, CopyOpResult>) {
          out.mutable_copy()->set_bytes(v.bytes);
        } else if constexpr (std::is_same_v<T, SnapshotResult>) {
          out.mutable_snapshot()->set_slot(v.slot);
          out.mutable_snapshot()->set_kept(v.kept);
        }
      },
      *r);
  return out;
}

// Random steps of every kind, through the client library (the packed form,
// over gRPC) and, on a twin core, as the list form: every result the client
// reads back, of every kind, refused or not, is the list form's.
TEST_F(GrpcServiceTest, ClientReadsEveryResultKindAsTheListFormGivesIt) {
  StartServer(12);
  StateCacheOptions options;
  options.identity.set_model_id("test-model");
  options.identity.set_hash_block_size(kBlockSize);
  options.identity.set_hash_namespace("ns");
  options.num_slots = 12;
  options.transfer = *StateTransfer::Create(TransferKind::kFork, 1, true);
  options.lease_ttl = absl::Seconds(10);
  options.clock = &clock_;
  std::unique_ptr<StateCache> twin = *StateCache::Create(options);
  v1::AttachRequest attach;
  *attach.mutable_identity() = options.identity;
  v1::AttachResponse attached;
  ASSERT_TRUE(twin->Attach(attach, &attached).ok());

  std::unique_ptr<Client> client = Connect();
  ASSERT_TRUE(client->Attach(TestIdentity(), "twin").ok());
  Draw draw(424242);
  int64_t compared_ok = 0, compared_refused = 0, moves = 0;
  for (int step = 0; step < 3000; ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    if (draw.Chance(3)) {  // shrink or grow both alike: begin_pass moves
      v1::ResizeRequest resize;
      resize.set_target_slots(draw.Pick({8, 10, 12}));
      auto ignore = [](absl::Status, const v1::ResizeResponse&) {};
      cache_->Resize(resize, ignore);
      twin->Resize(resize, ignore);
    }
    v1::StepRequest list;
    list.set_session_id(attached.session_id());
    StepBuilder builder;
    for (int64_t k = 1 + draw.Below(6); k > 0; --k) {
      draw.Operation(list.add_operations());
      AddToBuilder(builder, list.operations(list.operations_size() - 1));
    }
    v1::StepResponse want;
    ASSERT_TRUE(twin->Step(list, &want).ok());
    absl::StatusOr<StepResults> got = client->Step(builder);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->results.size(), static_cast<size_t>(want.results_size()));
    for (int i = 0; i < want.results_size(); ++i) {
      ASSERT_EQ(ToProto(got->results[i]).ShortDebugString(),
                want.results(i).ShortDebugString())
          << list.operations(i).ShortDebugString();
      (want.results(i).code() == 0 ? compared_ok : compared_refused) += 1;
      moves += want.results(i).begin_pass().moves_size();
    }
  }
  EXPECT_GT(compared_ok, 3000);
  EXPECT_GT(compared_refused, 3000);
  EXPECT_GT(moves, 0);
}

}  // namespace
}  // namespace statecache
