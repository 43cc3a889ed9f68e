// Daemon restarts: a client notices a restart it did not see (its session is
// gone, the epoch changed) and re-attaches; a second daemon refuses to steal
// a socket a live daemon serves.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>
#include <signal.h>
#include <sys/stat.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/test_util.h"

namespace statecache::testing {
namespace {

TEST(RestartTest, ClientNoticesTheRestartAndReattaches) {
  auto dir = TempDir::Create();
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::vector<std::string> flags =
      WithIdentity({"--num_slots=16", "--lease_ttl=3s"});
  auto first = DaemonProcess::Start(flags, dir->path());
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string address = (*first)->address();

  auto client = Client::Connect(address);
  ASSERT_TRUE(client.ok()) << client.status();
  auto session = (*client)->Attach(TestIdentity(), "survivor");
  ASSERT_TRUE(session.ok()) << session.status();
  const uint64_t epoch1 = session->epoch;
  EXPECT_EQ(epoch1, (*first)->logged_epoch());
  StepBuilder admit;
  admit.BeginPass().Admit("r1", kWidth, 100, 100, {}, 0);
  auto admitted = (*client)->Step(admit);
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_EQ(admitted->epoch, epoch1);

  // Stop (clean exit 0), start again on the same socket path.
  ASSERT_TRUE((*first)->StopCleanly().ok());
  auto second = DaemonProcess::Start(flags, dir->path());
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ((*second)->address(), address);
  EXPECT_NE((*second)->logged_epoch(), epoch1);

  // The client's next calls fail: UNAVAILABLE while its channel reconnects,
  // then NOT_FOUND (the new daemon never heard of the session).
  absl::Status last;
  ASSERT_TRUE(PollUntil(
      [&] {
        StepBuilder step;
        step.BeginPass();
        auto result = (*client)->Step(step);
        EXPECT_FALSE(result.ok()) << "a step on a session from before the "
                                     "restart succeeded";
        if (result.ok()) return true;
        last = result.status();
        EXPECT_TRUE(absl::IsNotFound(last) || absl::IsUnavailable(last))
            << last;
        return absl::IsNotFound(last);
      },
      absl::Seconds(20), absl::Milliseconds(50)))
      << last;
  // The library's "lease lost" signal.
  EXPECT_TRUE((*client)->lease_lost());
  EXPECT_TRUE(absl::IsNotFound((*client)->KeepAlive()));

  // Re-attach: a new session under a new epoch.
  auto again = (*client)->Attach(TestIdentity(), "survivor");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(again->epoch, epoch1);
  EXPECT_EQ(again->epoch, (*second)->logged_epoch());
  EXPECT_NE(again->session_id, session->session_id);
  EXPECT_FALSE((*client)->lease_lost());
  EXPECT_TRUE((*client)->KeepAlive().ok());
  auto readmitted = (*client)->Step(admit);
  ASSERT_TRUE(readmitted.ok()) << readmitted.status();
  EXPECT_EQ(readmitted->epoch, again->epoch);
  EXPECT_TRUE(readmitted->Get<AdmitResult>(1).ok())
      << "r1 is a new request in the new daemon";
  auto stats = (*client)->GetStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->epoch, again->epoch);
  EXPECT_EQ(stats->sessions, 1);
  EXPECT_EQ(stats->requests, 1);

  client->reset();
  EXPECT_TRUE((*second)->StopCleanly().ok());
}

TEST(RestartTest, RawKeepAliveShowsTheNewEpoch) {
  auto dir = TempDir::Create();
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::vector<std::string> flags = WithIdentity({"--num_slots=8"});
  auto first = DaemonProcess::Start(flags, dir->path());
  ASSERT_TRUE(first.ok()) << first.status();
  uint64_t epoch1 = 0;
  std::string old_session;
  {
    RawStubs stubs((*first)->address());
    v1::AttachRequest attach;
    *attach.mutable_identity() = TestIdentityProto();
    v1::AttachResponse response;
    ASSERT_TRUE(stubs.scheduler->Attach(Ctx().get(), attach, &response).ok());
    epoch1 = response.epoch();
    old_session = response.session_id();
    v1::KeepAliveRequest keepalive;
    keepalive.set_session_id(old_session);
    v1::KeepAliveResponse kr;
    ASSERT_TRUE(stubs.scheduler->KeepAlive(Ctx().get(), keepalive, &kr).ok());
    EXPECT_EQ(kr.epoch(), epoch1);
  }
  ASSERT_TRUE((*first)->StopCleanly().ok());
  auto second = DaemonProcess::Start(flags, dir->path());
  ASSERT_TRUE(second.ok()) << second.status();
  auto stubs_owner = std::make_unique<RawStubs>((*second)->address());
  RawStubs& stubs = *stubs_owner;
  v1::KeepAliveRequest keepalive;
  keepalive.set_session_id(old_session);
  v1::KeepAliveResponse kr;
  EXPECT_EQ(
      stubs.scheduler->KeepAlive(Ctx().get(), keepalive, &kr).error_code(),
      grpc::StatusCode::NOT_FOUND);
  v1::AttachRequest attach;
  *attach.mutable_identity() = TestIdentityProto();
  v1::AttachResponse response;
  ASSERT_TRUE(stubs.scheduler->Attach(Ctx().get(), attach, &response).ok());
  EXPECT_NE(response.epoch(), epoch1);
  keepalive.set_session_id(response.session_id());
  ASSERT_TRUE(stubs.scheduler->KeepAlive(Ctx().get(), keepalive, &kr).ok());
  EXPECT_EQ(kr.epoch(), response.epoch());
  v1::GetStatsResponse stats;
  ASSERT_TRUE(stubs.admin->GetStats(Ctx().get(), {}, &stats).ok());
  EXPECT_EQ(stats.epoch(), response.epoch());
  stubs_owner.reset();  // an idle connection would hold shutdown for its grace
  EXPECT_TRUE((*second)->StopCleanly().ok());
}

// What the proto says of a restart seen through a channel made before it:
// a call may first fail UNAVAILABLE (retryable: the channel reconnects),
// then the new daemon answers NOT_FOUND for the old session, with no epoch
// on a unary call; a StepStream response carries the new epoch even when it
// refuses the message, and so does GetStats.
TEST(RestartTest, OldChannelSeesUnavailableOrNotFoundThenTheNewEpoch) {
  auto dir = TempDir::Create();
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::vector<std::string> flags = WithIdentity({"--num_slots=8"});
  auto first = DaemonProcess::Start(flags, dir->path());
  ASSERT_TRUE(first.ok()) << first.status();
  RawStubs stubs((*first)->address());  // one channel, across the restart
  v1::AttachRequest attach;
  *attach.mutable_identity() = TestIdentityProto();
  v1::AttachResponse attached;
  ASSERT_TRUE(stubs.scheduler->Attach(Ctx().get(), attach, &attached).ok());
  ASSERT_TRUE((*first)->StopCleanly().ok());
  auto second = DaemonProcess::Start(flags, dir->path());
  ASSERT_TRUE(second.ok()) << second.status();

  v1::StepRequest step;
  step.set_session_id(attached.session_id());
  step.add_operations()->mutable_begin_pass();
  v1::StepResponse response;
  grpc::Status status = stubs.scheduler->Step(Ctx().get(), step, &response);
  int unavailable = 0;
  while (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    ASSERT_LT(++unavailable, 50) << "the old channel never reconnected";
    auto context = Ctx();
    context->set_wait_for_ready(true);  // a retry waits for the reconnect
    status = stubs.scheduler->Step(context.get(), step, &response);
  }
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND)
      << status.error_message();
  EXPECT_EQ(response.epoch(), 0u);  // a refused unary call carries none

  v1::GetStatsResponse stats;
  ASSERT_TRUE(stubs.admin->GetStats(Ctx().get(), {}, &stats).ok());
  EXPECT_NE(stats.epoch(), attached.epoch());
  {
    auto context = Ctx();
    auto stream = stubs.scheduler->StepStream(context.get());
    ASSERT_TRUE(stream->Write(step));
    ASSERT_TRUE(stream->Read(&response));
    EXPECT_EQ(response.error_code(),
              static_cast<int>(grpc::StatusCode::NOT_FOUND));
    EXPECT_EQ(response.epoch(), stats.epoch());
    ASSERT_TRUE(stream->WritesDone());
    EXPECT_TRUE(stream->Finish().ok());
  }
  EXPECT_TRUE((*second)->StopCleanly().ok());
}

// gRPC would unlink a live daemon's socket and bind over it; statecached
// refuses instead (exit 1, never ready) and the first daemon keeps serving.
TEST(RestartTest, SecondDaemonOnALiveSocketIsRefused) {
  auto first = DaemonProcess::Start(WithIdentity({"--num_slots=8"}));
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = DaemonProcess::Start(WithIdentity({"--num_slots=8"}),
                                     (*first)->socket_dir());
  ASSERT_FALSE(second.ok()) << "a second daemon took over a live socket";
  EXPECT_TRUE(
      absl::StrContains(second.status().message(), "exited with code 1"))
      << second.status();
  auto stubs_owner = std::make_unique<RawStubs>((*first)->address());
  RawStubs& stubs = *stubs_owner;
  v1::GetStatsResponse stats;
  ASSERT_TRUE(stubs.admin->GetStats(Ctx().get(), {}, &stats).ok());
  EXPECT_EQ(stats.epoch(), (*first)->logged_epoch());
  stubs_owner.reset();
  EXPECT_TRUE((*first)->StopCleanly().ok());
}

// A daemon with --shutdown_grace=`grace` besides `flags`.
absl::StatusOr<std::unique_ptr<DaemonProcess>> StartWithGrace(
    absl::Duration grace, std::vector<std::string> flags) {
  flags.push_back(
      absl::StrCat("--shutdown_grace=", absl::FormatDuration(grace)));
  return DaemonProcess::Start(WithIdentity(std::move(flags)));
}

// Stops `daemon` (SIGTERM; SIGKILL after `timeout`), expects exit code 0 and
// returns how long after `since` it was gone (recorded as shutdown_ms).
absl::Duration ExpectCleanStop(DaemonProcess& daemon, absl::Duration timeout,
                               absl::Time since) {
  auto exit = daemon.Stop(timeout);
  const absl::Duration took = absl::Now() - since;
  EXPECT_TRUE(exit.ok() && exit->exited && exit->code == 0)
      << (exit.ok() ? exit->ToString() : exit.status().ToString()) << "\n"
      << daemon.log();
  ::testing::Test::RecordProperty(
      "shutdown_ms", absl::StrCat(absl::ToInt64Milliseconds(took)));
  return took;
}

// SIGTERM while schedulers are connected, one with a StepStream open (and the
// metrics endpoint on): the daemon drains and exits 0 within its
// --shutdown_grace (plus slack), and the open stream ends instead of
// hanging.
TEST(ShutdownTest, SigtermWithClientsConnectedAndAStreamOpenExitsCleanly) {
  constexpr absl::Duration kGrace = absl::Milliseconds(300);
  auto daemon =
      StartWithGrace(kGrace, {"--num_slots=8",
                              // The default configuration serves metrics too.
                              "--metrics_address=127.0.0.1:0"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto client = Client::Connect((*daemon)->address());
  ASSERT_TRUE(client.ok()) << client.status();
  auto session = (*client)->Attach(TestIdentity(), "connected-at-shutdown");
  ASSERT_TRUE(session.ok()) << session.status();
  StepBuilder step;
  step.BeginPass().Admit("r", kWidth, 10, 0, {}, 0);
  ASSERT_TRUE((*client)->StepStreamed(step).ok());

  RawStubs stubs((*daemon)->address());
  auto context = Ctx(absl::Seconds(30));
  auto stream = stubs.scheduler->StepStream(context.get());
  v1::StepRequest request;
  request.set_session_id(session->session_id);
  request.add_operations()->mutable_begin_pass();
  ASSERT_TRUE(stream->Write(request));
  v1::StepResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.error_code(), 0) << response.error_message();

  EXPECT_LT(ExpectCleanStop(**daemon, absl::Seconds(20), absl::Now()),
            kGrace + absl::Seconds(5));
  // The stream was ended by the daemon, not left hanging.
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_FALSE(stream->Finish().ok());
  EXPECT_FALSE((*client)->Ping().ok());
}

// Schedulers stay connected: an idle connection, and a StepStream open
// between steps, must not hold up a restart. gRPC's Shutdown alone waited the
// whole --shutdown_grace for them to go away (20 s here).
TEST(ShutdownTest, IdleConnectionsAndStreamsDoNotHoldUpExit) {
  constexpr absl::Duration kGrace = absl::Seconds(20);
  auto daemon = StartWithGrace(kGrace, {"--num_slots=8"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto client = Client::Connect((*daemon)->address());
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Attach(TestIdentity(), "idle").ok());
  StepBuilder step;
  step.BeginPass();
  ASSERT_TRUE((*client)->Step(step).ok());
  ASSERT_TRUE((*client)->StepStreamed(step).ok());  // the stream stays open
  RawStubs stubs((*daemon)->address());
  v1::PingResponse pong;
  ASSERT_TRUE(stubs.scheduler->Ping(Ctx().get(), {}, &pong).ok());

  EXPECT_LT(ExpectCleanStop(**daemon, kGrace + absl::Seconds(10), absl::Now()),
            absl::Seconds(5));
}

// The status the daemon's gRPC health service reports for the whole server
// (grpc.health.v1.Health/Check, service ""): 1 SERVING, 2 NOT_SERVING, or -1
// when the call failed. The request is the empty message; the response's
// only field is `status` (field 1, an enum), so both are spelled as bytes
// rather than linking the health proto's generated code.
int HealthStatus(const std::string& address) {
  grpc::GenericStub stub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  grpc::Slice no_bytes;
  grpc::ByteBuffer request(&no_bytes, 1);  // empty: service ""
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", {}, &request,
                 &response, [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  if (!status.ok()) return -1;
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return -1;
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  if (bytes.empty()) return 0;  // status 0 (UNKNOWN) is encoded as nothing
  if (bytes.size() != 2 || bytes[0] != 0x08) return -1;
  return bytes[1];
}

// A call whose work is under way when SIGTERM arrives is waited for: a shrink
// pending on a held slot finishes (and answers OK) once the slot is released
// during the drain, and the daemon exits right after, long before its grace.
// Meanwhile the daemon is draining: the health service says NOT_SERVING,
// Attach is refused UNAVAILABLE and so is an admit, while the session's
// admitted request still runs (its release succeeds).
TEST(ShutdownTest, DrainsWhileAResizeInProgressIsWaitedForThenExits) {
  constexpr absl::Duration kGrace = absl::Seconds(20);
  auto daemon = StartWithGrace(kGrace, {"--num_slots=4"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto scheduler = Client::Connect((*daemon)->address());
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  ASSERT_TRUE((*scheduler)->Attach(TestIdentity(), "holder").ok());
  StepBuilder admit;
  admit.Admit("r", 4, 10, 10, {}, 0);  // every slot
  auto admitted = (*scheduler)->Step(admit);
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  ASSERT_TRUE(admitted->results[0].ok()) << admitted->results[0].status();

  EXPECT_EQ(HealthStatus((*daemon)->address()), 1);  // SERVING

  auto admin = Client::Connect((*daemon)->address());
  ASSERT_TRUE(admin.ok()) << admin.status();
  absl::StatusOr<ResizeResult> shrunk;
  std::thread resize([&] { shrunk = (*admin)->Resize(2, absl::Seconds(60)); });
  // Once a no-op resize is refused as ABORTED, the shrink is pending.
  auto probe = Client::Connect((*daemon)->address());
  ASSERT_TRUE(probe.ok()) << probe.status();
  absl::Status second;
  do {
    second = (*probe)->Resize(4).status();
  } while (second.ok());
  ASSERT_TRUE(absl::IsAborted(second)) << second;

  const absl::Time start = absl::Now();
  ASSERT_EQ(::kill((*daemon)->pid(), SIGTERM), 0);
  // The daemon is now waiting on the resize (it says so before it waits).
  // (The probe's refused Resize may not have ended yet either: "1 or 2".)
  while (!absl::StrContains((*daemon)->log(), "waiting for ")) {
    ASSERT_LT(absl::Now() - start, absl::Seconds(10)) << (*daemon)->log();
    std::this_thread::yield();
  }
  // Draining: health checkers are told, new sessions and admissions go
  // elsewhere...
  EXPECT_EQ(HealthStatus((*daemon)->address()), 2);  // NOT_SERVING
  EXPECT_TRUE(
      absl::IsUnavailable((*probe)->Attach(TestIdentity(), "late").status()));
  StepBuilder late_admit;
  late_admit.Admit("late", 1, 10, 10, {}, 0);
  auto refused = (*scheduler)->Step(late_admit);
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_TRUE(absl::IsUnavailable(refused->results[0].status()))
      << refused->results[0].status();
  // ...while the session still runs its requests; the release lets the
  // shrink finish.
  StepBuilder release;
  release.Release("r");
  absl::StatusOr<StepResults> released;
  do {
    released = (*scheduler)->Step(release);
  } while (!released.ok() && absl::Now() - start < absl::Seconds(10));
  ASSERT_TRUE(released.ok()) << released.status();
  resize.join();
  ASSERT_TRUE(shrunk.ok()) << shrunk.status();
  EXPECT_EQ(shrunk->num_slots, 2);

  // From SIGTERM: the wait for the resize and the exit after it.
  EXPECT_LT(ExpectCleanStop(**daemon, kGrace + absl::Seconds(10), start),
            absl::Seconds(5));
}

}  // namespace
}  // namespace statecache::testing
