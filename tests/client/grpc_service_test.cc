// The gRPC adapter (daemon/service/grpc_service.h) and the C++ client
// (client/statecache_client.h) together, in one process: a real gRPC server
// on loopback over a StateCache with a fake clock, so lease expiry needs no
// sleeping. What is tested here is the translation (statuses, per-message
// stream errors, the deferred Resize), not the pool's decisions (those are
// tests/service and tests/parity).
#include "daemon/service/grpc_service.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/statecache_client.h"
#include "daemon/service/grpc_status.h"
#include "daemon/service/session_event_log.h"
#include "daemon/service/state_cache.h"
#include "gtest/gtest.h"
#include "proto/statecache/v1/statecache.grpc.pb.h"
#include "tests/service/fake_clock.h"

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
  v1::AttachRequest attach;
  attach.mutable_identity()->set_model_id("test-model");
  attach.mutable_identity()->set_hash_block_size(kBlockSize);
  attach.mutable_identity()->set_hash_namespace("ns");
  v1::AttachResponse first, second;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->Attach(&context, attach, &first).ok());
  }
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->Attach(&context, attach, &second).ok());
  }

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

  // Still serving.
  request.clear_operations();
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
  EXPECT_EQ((*sessions)[0].session_id, scheduler->session()->session_id);

  auto evicted = admin->EvictSession((*sessions)[0].session_id);
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

}  // namespace
}  // namespace statecache
