// Every documented refusal, provoked against the real daemon over gRPC with
// the raw generated stubs, with its exact code asserted and GetStats (all of
// it but uptime_seconds) and ListSessions' per-session counts unchanged
// afterwards: a refusal has no effect. Garbage written straight onto the
// Unix socket must not hurt the daemon either.
#include <google/protobuf/util/message_differencer.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/attach_session.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/test_util.h"

namespace statecache::testing {
namespace {

constexpr int64_t kSlots = 16;
constexpr int kMaxOps = 8;
constexpr int kMaxMessageBytes = 4096;

using Code = grpc::StatusCode;

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto daemon = DaemonProcess::Start(
        WithIdentity({absl::StrCat("--num_slots=", kSlots),
                      absl::StrCat("--max_ops_per_step=", kMaxOps),
                      absl::StrCat("--max_message_bytes=", kMaxMessageBytes)}));
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    stubs_ = std::make_unique<RawStubs>(daemon_->address());

    a_ = Attach("bad-input-a");
    b_ = Attach("bad-input-b");
    ASSERT_FALSE(a_.empty());
    ASSERT_FALSE(b_.empty());
    hashes_ = ChainedHashes({1, 2, 3, 4});
    // Session A: a request with a fork checkpoint filed (a pinned source,
    // an indexed hash); session B: a request of its own.
    v1::StepRequest a = StepFor(a_);
    a.add_operations()->mutable_begin_pass();
    Admit(a, "a1", kWidth, 300, 256, hashes_, 0);
    v1::Checkpoint* cp = a.add_operations()->mutable_checkpoint();
    cp->set_request_id("a1");
    cp->set_boundary_blocks(4);
    cp->set_hash(hashes_[3]);
    v1::StepResponse response;
    ASSERT_TRUE(Step(a, &response).ok());
    for (const auto& r : response.results()) ASSERT_EQ(r.code(), 0);
    ASSERT_TRUE(response.results(2).checkpoint().kept());
    v1::StepRequest b = StepFor(b_);
    Admit(b, "b1", kWidth, 100, 0, {}, 0);
    ASSERT_TRUE(Step(b, &response).ok());
    ASSERT_EQ(response.results(0).code(), 0);
    baseline_ = Stats();
    baseline_sessions_ = Sessions();
    ASSERT_EQ(baseline_.sessions(), 2);
    ASSERT_EQ(baseline_.requests(), 2);
    ASSERT_EQ(baseline_.indexed_hashes(), 1);
    ASSERT_GT(baseline_.slots_used(), 0);
  }

  void TearDown() override {
    stubs_.reset();
    if (daemon_) {
      EXPECT_TRUE(daemon_->StopCleanly().ok()) << daemon_->log();
    }
  }

  std::string Attach(const std::string& name) {
    return AttachSession(*stubs_, name);
  }

  static v1::StepRequest StepFor(const std::string& session) {
    v1::StepRequest request;
    request.set_session_id(session);
    return request;
  }

  static v1::Admit* Admit(v1::StepRequest& step, const std::string& id,
                          int32_t width, int64_t num_tokens, int64_t anchor_pos,
                          const std::vector<int64_t>& hashes, int32_t kv_hit) {
    v1::Admit* admit = step.add_operations()->mutable_admit();
    admit->set_request_id(id);
    admit->set_width(width);
    admit->set_num_tokens(num_tokens);
    admit->set_anchor_pos(anchor_pos);
    admit->mutable_block_hashes()->Add(hashes.begin(), hashes.end());
    admit->set_kv_hit_blocks(kv_hit);
    return admit;
  }

  grpc::Status Step(const v1::StepRequest& request,
                    v1::StepResponse* response) {
    response->Clear();
    return stubs_->scheduler->Step(Ctx().get(), request, response);
  }

  // Runs a one-operation step on session A and returns the operation's code
  // and message (the RPC itself must succeed).
  std::pair<int, std::string> OpOn(const std::string& session,
                                   const v1::Operation& op) {
    v1::StepRequest request = StepFor(session);
    *request.add_operations() = op;
    v1::StepResponse response;
    grpc::Status status = Step(request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    if (!status.ok() || response.results_size() != 1) return {-1, ""};
    if (response.results(0).code() != 0) {
      EXPECT_EQ(response.results(0).result_case(),
                v1::OperationResult::RESULT_NOT_SET)
          << "a refused operation carries no result";
    }
    return {response.results(0).code(), response.results(0).message()};
  }

  v1::GetStatsResponse Stats() {
    v1::GetStatsResponse stats;
    grpc::Status status =
        stubs_->admin->GetStats(Ctx().get(), v1::GetStatsRequest(), &stats);
    EXPECT_TRUE(status.ok()) << status.error_message();
    stats.clear_uptime_seconds();
    return stats;
  }

  // Per session: (id, name, requests, slots, pins).
  std::vector<std::string> Sessions() {
    v1::ListSessionsResponse list;
    grpc::Status status = stubs_->admin->ListSessions(
        Ctx().get(), v1::ListSessionsRequest(), &list);
    EXPECT_TRUE(status.ok()) << status.error_message();
    std::vector<std::string> out;
    for (const v1::SessionInfo& s : list.sessions()) {
      out.push_back(absl::StrCat(s.session_id(), " ", s.client_name(),
                                 " r=", s.requests(), " s=", s.slots(),
                                 " p=", s.pins()));
    }
    return out;
  }

  void ExpectUnchanged(const std::string& what) {
    const v1::GetStatsResponse now = Stats();
    std::string diff;
    google::protobuf::util::MessageDifferencer differencer;
    differencer.ReportDifferencesToString(&diff);
    EXPECT_TRUE(differencer.Compare(baseline_, now))
        << what << " changed GetStats:\n"
        << diff;
    EXPECT_EQ(Sessions(), baseline_sessions_) << what;
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<RawStubs> stubs_;
  std::string a_, b_;
  std::vector<int64_t> hashes_;
  v1::GetStatsResponse baseline_;
  std::vector<std::string> baseline_sessions_;
};

// ----------------------------------------------------- per-operation codes

TEST_F(BadInputTest, RefusedOperationsHaveTheirCodeAndNoEffect) {
  struct Case {
    std::string name;
    std::function<void(v1::Operation&)> build;
    int code;
    bool on_b = false;  // run on session B instead of A
  };
  auto admit = [](const std::string& id, int32_t width, int64_t tokens,
                  std::vector<int64_t> hashes, int32_t kv) {
    return [=](v1::Operation& op) {
      v1::Admit* a = op.mutable_admit();
      a->set_request_id(id);
      a->set_width(width);
      a->set_num_tokens(tokens);
      a->mutable_block_hashes()->Add(hashes.begin(), hashes.end());
      a->set_kv_hit_blocks(kv);
    };
  };
  const std::vector<int64_t> h = hashes_;
  const int kNotFound = Code::NOT_FOUND;
  const int kInvalid = Code::INVALID_ARGUMENT;
  std::vector<Case> cases = {
      // A request the session does not hold.
      {"release unknown request",
       [](auto& op) { op.mutable_release()->set_request_id("nope"); },
       kNotFound},
      {"reserve unknown request",
       [](auto& op) {
         op.mutable_reserve()->set_request_id("nope");
         auto* p = op.mutable_reserve()->add_positions();
         p->set_position(64);
         p->set_hash(7);
       },
       kNotFound},
      {"publish unknown request",
       [](auto& op) { op.mutable_publish()->set_request_id("nope"); },
       kNotFound},
      {"cancel unknown request",
       [](auto& op) { op.mutable_cancel()->set_request_id("nope"); },
       kNotFound},
      {"checkpoint unknown request",
       [](auto& op) {
         op.mutable_checkpoint()->set_request_id("nope");
         op.mutable_checkpoint()->set_boundary_blocks(1);
         op.mutable_checkpoint()->set_hash(11);
       },
       kNotFound},
      {"consume_fork unknown request",
       [](auto& op) { op.mutable_consume_fork()->set_request_id("nope"); },
       kNotFound},
      {"adopt_fork_source unknown request",
       [](auto& op) { op.mutable_adopt_fork_source()->set_request_id("nope"); },
       kNotFound},
      // Another session's request: ids are private to their session.
      {"release another session's request",
       [](auto& op) { op.mutable_release()->set_request_id("b1"); }, kNotFound},
      {"checkpoint another session's request",
       [](auto& op) {
         op.mutable_checkpoint()->set_request_id("b1");
         op.mutable_checkpoint()->set_boundary_blocks(1);
         op.mutable_checkpoint()->set_hash(12);
       },
       kNotFound},
      {"reserve another session's request",
       [](auto& op) {
         op.mutable_reserve()->set_request_id("b1");
         auto* p = op.mutable_reserve()->add_positions();
         p->set_position(64);
         p->set_hash(13);
       },
       kNotFound},
      {"consume_fork another session's request",
       [](auto& op) { op.mutable_consume_fork()->set_request_id("b1"); },
       kNotFound},
      {"release A's request from B",
       [](auto& op) { op.mutable_release()->set_request_id("a1"); }, kNotFound,
       /*on_b=*/true},
      // Admit arguments.
      {"duplicate admit", admit("a1", kWidth, 100, {}, 0),
       Code::ALREADY_EXISTS},
      {"duplicate admit in B", admit("b1", kWidth, 100, {}, 0),
       Code::ALREADY_EXISTS, true},
      {"width 0", admit("w0", 0, 100, {}, 0), kInvalid},
      {"negative width", admit("wneg", -1, 100, {}, 0), kInvalid},
      {"width beyond the pool", admit("wbig", kSlots + 1, 100, {}, 0),
       kInvalid},
      {"negative kv_hit_blocks", admit("kvneg", kWidth, 300, h, -1), kInvalid},
      {"kv_hit_blocks beyond the hashes", admit("kvbig", kWidth, 300, h, 5),
       kInvalid},
      {"negative block hash", admit("hneg", kWidth, 300, {h[0], -5, h[2]}, 1),
       kInvalid},
      {"negative num_tokens", admit("tneg", kWidth, -1, {}, 0), kInvalid},
      {"negative anchor_pos",
       [](auto& op) {
         op.mutable_admit()->set_request_id("aneg");
         op.mutable_admit()->set_width(kWidth);
         op.mutable_admit()->set_num_tokens(10);
         op.mutable_admit()->set_anchor_pos(-64);
       },
       kInvalid},
      {"empty request_id", admit("", kWidth, 100, {}, 0), kInvalid},
      {"request_id over 256 bytes",
       admit(std::string(257, 'r'), kWidth, 100, {}, 0), kInvalid},
      {"admit more slots than are free", admit("huge", kSlots, 100, {}, 0),
       Code::RESOURCE_EXHAUSTED},
      // Queries.
      {"resumable_hit negative hash",
       [](auto& op) {
         op.mutable_resumable_hit()->set_num_tokens(300);
         op.mutable_resumable_hit()->add_block_hashes(-1);
         op.mutable_resumable_hit()->set_kv_hit_blocks(1);
       },
       kInvalid},
      {"resumable_hit kv beyond the hashes",
       [h](auto& op) {
         op.mutable_resumable_hit()->set_num_tokens(300);
         op.mutable_resumable_hit()->add_block_hashes(h[0]);
         op.mutable_resumable_hit()->set_kv_hit_blocks(2);
       },
       kInvalid},
      {"resumable_hit negative kv",
       [h](auto& op) {
         op.mutable_resumable_hit()->set_num_tokens(300);
         op.mutable_resumable_hit()->add_block_hashes(h[0]);
         op.mutable_resumable_hit()->set_kv_hit_blocks(-1);
       },
       kInvalid},
      {"lookup negative hash",
       [](auto& op) { op.mutable_lookup()->set_hash(-3); }, kInvalid},
      // Operations on a held request with bad arguments.
      {"reserve negative hash",
       [](auto& op) {
         op.mutable_reserve()->set_request_id("a1");
         auto* p = op.mutable_reserve()->add_positions();
         p->set_position(64);
         p->set_hash(21);
         p = op.mutable_reserve()->add_positions();
         p->set_position(128);
         p->set_hash(-21);
       },
       kInvalid},
      {"checkpoint negative boundary",
       [](auto& op) {
         op.mutable_checkpoint()->set_request_id("a1");
         op.mutable_checkpoint()->set_boundary_blocks(-1);
         op.mutable_checkpoint()->set_hash(31);
       },
       kInvalid},
      {"checkpoint negative hash",
       [](auto& op) {
         op.mutable_checkpoint()->set_request_id("a1");
         op.mutable_checkpoint()->set_boundary_blocks(1);
         op.mutable_checkpoint()->set_hash(-31);
       },
       kInvalid},
      {"checkpoint negative anchor_pos",
       [](auto& op) {
         op.mutable_checkpoint()->set_request_id("a1");
         op.mutable_checkpoint()->set_boundary_blocks(1);
         op.mutable_checkpoint()->set_hash(32);
         op.mutable_checkpoint()->set_anchor_pos(-1);
       },
       kInvalid},
      {"unindex with one negative hash (the filed one must stay)",
       [h](auto& op) {
         op.mutable_unindex()->add_hashes(h[3]);
         op.mutable_unindex()->add_hashes(-1);
       },
       kInvalid},
      {"adopt_fork_source without a fork source (B's cold request)",
       [](auto& op) { op.mutable_adopt_fork_source()->set_request_id("b1"); },
       Code::FAILED_PRECONDITION, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    v1::Operation op;
    c.build(op);
    auto [code, message] = OpOn(c.on_b ? b_ : a_, op);
    EXPECT_EQ(code, c.code) << message;
    EXPECT_FALSE(message.empty()) << "a refusal names the problem";
    ExpectUnchanged(c.name);
  }
}

// A refused operation does not stop the rest of its step.
TEST_F(BadInputTest, LaterOperationsOfAStepStillRun) {
  v1::StepRequest request = StepFor(a_);
  request.add_operations()->mutable_release()->set_request_id("nope");
  request.add_operations()->mutable_lookup()->set_hash(hashes_[3]);
  v1::StepResponse response;
  ASSERT_TRUE(Step(request, &response).ok());
  ASSERT_EQ(response.results_size(), 2);
  EXPECT_EQ(response.results(0).code(), Code::NOT_FOUND);
  EXPECT_EQ(response.results(1).code(), 0);
  EXPECT_GE(response.results(1).lookup().slot(), 0);
  ExpectUnchanged("refusal followed by a lookup");

  // And one that changes something after a refusal does apply.
  request = StepFor(a_);
  request.add_operations()->mutable_release()->set_request_id("nope");
  request.add_operations()->mutable_release()->set_request_id("a1");
  ASSERT_TRUE(Step(request, &response).ok());
  ASSERT_EQ(response.results_size(), 2);
  EXPECT_EQ(response.results(0).code(), Code::NOT_FOUND);
  EXPECT_EQ(response.results(1).code(), 0);
  EXPECT_EQ(response.results(1).release().slots_released(), kWidth);
  EXPECT_EQ(Stats().requests(), 1);
}

// ----------------------------------------------------- whole-RPC refusals

TEST_F(BadInputTest, UnknownSessionIsNotFound) {
  for (const std::string& id : {std::string("0123456789abcdef"),
                                std::string(""), std::string(300, 'x')}) {
    SCOPED_TRACE(absl::StrCat("session id of ", id.size(), " bytes"));
    v1::StepRequest request = StepFor(id);
    Admit(request, "x", kWidth, 10, 0, {}, 0);
    v1::StepResponse response;
    grpc::Status status = Step(request, &response);
    EXPECT_EQ(status.error_code(), Code::NOT_FOUND) << status.error_message();
    EXPECT_EQ(response.results_size(), 0);

    v1::KeepAliveRequest keepalive;
    keepalive.set_session_id(id);
    v1::KeepAliveResponse kr;
    EXPECT_EQ(
        stubs_->scheduler->KeepAlive(Ctx().get(), keepalive, &kr).error_code(),
        Code::NOT_FOUND);
    v1::DetachRequest detach;
    detach.set_session_id(id);
    v1::DetachResponse dr;
    EXPECT_EQ(stubs_->scheduler->Detach(Ctx().get(), detach, &dr).error_code(),
              Code::NOT_FOUND);
    v1::EvictSessionRequest evict;
    evict.set_session_id(id);
    v1::EvictSessionResponse er;
    EXPECT_EQ(stubs_->admin->EvictSession(Ctx().get(), evict, &er).error_code(),
              Code::NOT_FOUND);
    ExpectUnchanged("unknown session");
  }
}

TEST_F(BadInputTest, IdentityMismatchNamesTheField) {
  struct Case {
    std::string field;
    std::function<void(v1::Identity&)> spoil;
  };
  const std::vector<Case> cases = {
      {"model_id", [](auto& id) { id.set_model_id("other/model"); }},
      {"hash_block_size", [](auto& id) { id.set_hash_block_size(32); }},
      {"hash_namespace", [](auto& id) { id.set_hash_namespace("other"); }},
      {"num_spec", [](auto& id) { id.set_num_spec(kNumSpec + 1); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    v1::AttachRequest request;
    *request.mutable_identity() = TestIdentityProto();
    c.spoil(*request.mutable_identity());
    request.set_client_name("wrong-model");
    v1::AttachResponse response;
    grpc::Status status =
        stubs_->scheduler->Attach(Ctx().get(), request, &response);
    EXPECT_EQ(status.error_code(), Code::FAILED_PRECONDITION)
        << status.error_message();
    EXPECT_TRUE(absl::StrContains(status.error_message(), c.field))
        << status.error_message();
    EXPECT_TRUE(response.session_id().empty());
    ExpectUnchanged(c.field);
  }
  // An empty identity is a mismatch too.
  v1::AttachRequest empty;
  v1::AttachResponse response;
  EXPECT_EQ(
      stubs_->scheduler->Attach(Ctx().get(), empty, &response).error_code(),
      Code::FAILED_PRECONDITION);
  // client_name over 256 bytes.
  v1::AttachRequest long_name;
  *long_name.mutable_identity() = TestIdentityProto();
  long_name.set_client_name(std::string(257, 'n'));
  EXPECT_EQ(
      stubs_->scheduler->Attach(Ctx().get(), long_name, &response).error_code(),
      Code::INVALID_ARGUMENT);
  ExpectUnchanged("bad attaches");
}

TEST_F(BadInputTest, TooManyOperationsRefuseTheWholeStep) {
  // At the limit: fine (queries only, nothing changes).
  v1::StepRequest at_limit = StepFor(a_);
  for (int i = 0; i < kMaxOps; ++i) {
    at_limit.add_operations()->mutable_lookup()->set_hash(hashes_[3]);
  }
  v1::StepResponse response;
  grpc::Status status = Step(at_limit, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.results_size(), kMaxOps);
  // One over: refused whole, although every operation is a valid admit.
  v1::StepRequest over = StepFor(a_);
  for (int i = 0; i <= kMaxOps; ++i) {
    Admit(over, absl::StrCat("over", i), 1, 10, 0, {}, 0);
  }
  status = Step(over, &response);
  EXPECT_EQ(status.error_code(), Code::INVALID_ARGUMENT)
      << status.error_message();
  EXPECT_EQ(response.results_size(), 0);
  ExpectUnchanged("too many operations");
}

TEST_F(BadInputTest, OperationWithNoKindRefusesTheWholeStep) {
  v1::StepRequest request = StepFor(a_);
  Admit(request, "before-empty", 1, 10, 0, {}, 0);
  request.add_operations();  // no kind set
  v1::StepResponse response;
  grpc::Status status = Step(request, &response);
  EXPECT_EQ(status.error_code(), Code::INVALID_ARGUMENT)
      << status.error_message();
  EXPECT_EQ(response.results_size(), 0);
  ExpectUnchanged("an operation with no kind");
}

TEST_F(BadInputTest, MalformedPackedStepRefusesTheWholeStep) {
  // A packed admit whose columns are then spoiled one way each: the whole
  // step is INVALID_ARGUMENT, its message names the column, nothing changes.
  auto admit = [&] {
    v1::StepRequest request = StepFor(a_);
    v1::PackedOperations* p = request.mutable_packed();
    p->add_kinds(v1::Operation::kAdmit);
    p->set_request_ids("packed-admit");
    p->add_request_id_lengths(12);
    for (int64_t v : {1, 200, 0, 2}) p->add_args(v);  // ..., len(hashes)
    p->add_hashes(hashes_[0]);
    p->add_hashes(hashes_[1]);
    p->add_args(0);  // kv_hit_blocks
    return request;
  };
  struct Case {
    const char* name;
    std::function<void(v1::PackedOperations*)> spoil;
    const char* names;
  };
  const std::vector<Case> cases = {
      {"unknown kind", [](auto* p) { p->set_kinds(0, 99); }, "unknown kind"},
      {"args short", [](auto* p) { p->mutable_args()->RemoveLast(); }, "args"},
      {"args long", [](auto* p) { p->add_args(1); }, "args"},
      {"hashes short", [](auto* p) { p->mutable_hashes()->RemoveLast(); },
       "hashes"},
      {"id length past the bytes",
       [](auto* p) { p->set_request_id_lengths(0, 40); }, "request_ids"},
      {"negative length", [](auto* p) { p->set_args(3, -2); }, "negative"},
      {"width beyond int32", [](auto* p) { p->set_args(0, int64_t{1} << 40); },
       "int32"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    v1::StepRequest request = admit();
    c.spoil(request.mutable_packed());
    v1::StepResponse response;
    grpc::Status status = Step(request, &response);
    EXPECT_EQ(status.error_code(), Code::INVALID_ARGUMENT)
        << status.error_message();
    EXPECT_NE(status.error_message().find(c.names), std::string::npos)
        << status.error_message();
    ExpectUnchanged(c.name);
  }
  // Both forms in one step.
  v1::StepRequest both = admit();
  Admit(both, "list-too", 1, 10, 0, {}, 0);
  v1::StepResponse response;
  grpc::Status status = Step(both, &response);
  EXPECT_EQ(status.error_code(), Code::INVALID_ARGUMENT);
  ExpectUnchanged("both forms");
  // The unspoiled one is served, its result packed.
  status = Step(admit(), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.packed_results().codes_size(), 1);
  EXPECT_EQ(response.packed_results().codes(0), 0u)
      << response.ShortDebugString();
  EXPECT_EQ(response.results_size(), 0);
}

TEST_F(BadInputTest, MessageOverTheLimitIsResourceExhausted) {
  v1::StepRequest request = StepFor(a_);
  std::vector<int64_t> many;
  for (int i = 0; i < 1000; ++i) many.push_back(Mix(i));
  Admit(request, "huge-message", 1, 64 * 1000 + 1, 0, many, 0);
  ASSERT_GT(request.ByteSizeLong(), static_cast<size_t>(kMaxMessageBytes));
  v1::StepResponse response;
  grpc::Status status = Step(request, &response);
  EXPECT_EQ(status.error_code(), Code::RESOURCE_EXHAUSTED)
      << status.error_message();
  ExpectUnchanged("a message over --max_message_bytes");
  // The channel and the daemon carry on.
  v1::PingResponse pong;
  EXPECT_TRUE(
      stubs_->scheduler->Ping(Ctx().get(), v1::PingRequest(), &pong).ok());
}

TEST_F(BadInputTest, AdminRefusals) {
  for (int64_t target : {int64_t{0}, int64_t{-5}, int64_t{1} << 40}) {
    SCOPED_TRACE(absl::StrCat("resize to ", target));
    v1::ResizeRequest request;
    request.set_target_slots(target);
    request.set_deadline_ms(1000);
    v1::ResizeResponse response;
    grpc::Status status =
        stubs_->admin->Resize(Ctx().get(), request, &response);
    EXPECT_EQ(status.error_code(), Code::INVALID_ARGUMENT)
        << status.error_message();
    ExpectUnchanged(absl::StrCat("resize to ", target));
  }
  v1::EvictSessionRequest evict;
  evict.set_session_id("not-a-session");
  v1::EvictSessionResponse er;
  grpc::Status status = stubs_->admin->EvictSession(Ctx().get(), evict, &er);
  EXPECT_EQ(status.error_code(), Code::NOT_FOUND) << status.error_message();
  ExpectUnchanged("evicting an unknown session");
}

// ----------------------------------------------------- garbage on the wire

// Writes `bytes` onto a fresh connection to the Unix socket and closes it.
void WriteRaw(const std::string& socket_path, const std::string& bytes) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(socket_path.size(), sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
      << std::strerror(errno);
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n =
        ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;  // the daemon may hang up on garbage: that is fine
    off += static_cast<size_t>(n);
  }
  ::close(fd);
}

TEST_F(BadInputTest, GarbageOnTheSocketDoesNotHurtTheDaemon) {
  std::mt19937_64 rng(20261129);
  auto random_bytes = [&](size_t n) {
    std::string s(n, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    return s;
  };
  const std::string preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  const std::vector<std::pair<std::string, std::string>> payloads = {
      {"random bytes", random_bytes(4096)},
      {"a lot of random bytes", random_bytes(256 << 10)},
      {"HTTP/1.1 request", "GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
      {"HTTP/2 preface then garbage frames", preface + random_bytes(2048)},
      {"HTTP/2 preface, then a huge frame length",
       preface + std::string("\xff\xff\xff\x00\x00\x00\x00\x00\x01", 9) +
           random_bytes(100)},
      {"half a preface", preface.substr(0, 10)},
      {"nothing at all", ""},
  };
  for (const auto& [name, bytes] : payloads) {
    SCOPED_TRACE(name);
    WriteRaw(daemon_->socket_path(), bytes);
    v1::PingResponse pong;
    grpc::Status ping =
        stubs_->scheduler->Ping(Ctx().get(), v1::PingRequest(), &pong);
    EXPECT_TRUE(ping.ok()) << ping.error_message();
    ExpectUnchanged(name);
  }
  // Sessions still work.
  v1::StepRequest request = StepFor(a_);
  request.add_operations()->mutable_lookup()->set_hash(hashes_[3]);
  v1::StepResponse response;
  ASSERT_TRUE(Step(request, &response).ok());
  EXPECT_GE(response.results(0).lookup().slot(), 0);
}

// ----------------------------------------------------- an expired session

TEST(ExpiredSessionTest, ExpiredSessionIsNotFoundAndItsSlotsAreFreed) {
  constexpr absl::Duration kTtl = absl::Seconds(1);
  auto daemon =
      DaemonProcess::Start(WithIdentity({"--num_slots=16", "--lease_ttl=1s"}));
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto stubs_owner = std::make_unique<RawStubs>((*daemon)->address());
  RawStubs& stubs = *stubs_owner;

  v1::AttachRequest attach;
  *attach.mutable_identity() = TestIdentityProto();
  attach.set_client_name("goes-quiet");
  v1::AttachResponse session;
  ASSERT_TRUE(stubs.scheduler->Attach(Ctx().get(), attach, &session).ok());
  EXPECT_EQ(session.lease_ttl_ms(), absl::ToInt64Milliseconds(kTtl));
  v1::StepRequest step;
  step.set_session_id(session.session_id());
  v1::Admit* admit = step.add_operations()->mutable_admit();
  admit->set_request_id("quiet-1");
  admit->set_width(kWidth);
  admit->set_num_tokens(10);
  v1::StepResponse response;
  // The daemon hears the Step somewhere between sending and the reply, so
  // the time before sending is the earliest its lease clock can start.
  const absl::Time sent = absl::Now();
  ASSERT_TRUE(stubs.scheduler->Step(Ctx().get(), step, &response).ok());
  ASSERT_EQ(response.results(0).code(), 0);

  // Nobody renews: the daemon's maintenance expires the session by itself.
  v1::GetStatsResponse stats;
  // Polls GetStats into `stats` until `done(stats)`.
  auto stats_until = [&](auto done) {
    return PollUntil(
        [&] {
          stats.Clear();
          EXPECT_TRUE(stubs.admin->GetStats(Ctx().get(), {}, &stats).ok());
          return done(stats);
        },
        10 * kTtl);
  };
  ASSERT_TRUE(stats_until([](const v1::GetStatsResponse& s) {
    return s.sessions() == 0;
  })) << "the session never expired";
  EXPECT_GE(absl::Now() - sent, kTtl);
  EXPECT_EQ(stats.lease_expiries(), 1);
  EXPECT_EQ(stats.requests(), 0);
  // Fenced for one lease TTL (--quarantine's default): its hung engine may
  // still write them, so nobody gets them yet...
  EXPECT_EQ(stats.slots_used(), kWidth);
  // ...and then they are free again, by the daemon's own maintenance.
  ASSERT_TRUE(stats_until([](const v1::GetStatsResponse& s) {
    return s.slots_used() == 0;
  })) << "the fenced slots were never freed";
  EXPECT_GE(absl::Now() - sent, 2 * kTtl) << "freed before the quarantine";
  stats.clear_uptime_seconds();

  grpc::Status status = stubs.scheduler->Step(Ctx().get(), step, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "expired"))
      << status.error_message();
  v1::KeepAliveRequest keepalive;
  keepalive.set_session_id(session.session_id());
  v1::KeepAliveResponse kr;
  status = stubs.scheduler->KeepAlive(Ctx().get(), keepalive, &kr);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "expired"))
      << status.error_message();

  v1::GetStatsResponse after;
  ASSERT_TRUE(stubs.admin->GetStats(Ctx().get(), {}, &after).ok());
  after.clear_uptime_seconds();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(stats, after))
      << "calls on an expired session changed the daemon:\n"
      << stats.DebugString() << "\nvs\n"
      << after.DebugString();
  stubs_owner.reset();  // an idle connection would hold shutdown for its grace
  EXPECT_TRUE((*daemon)->StopCleanly().ok());
}

}  // namespace
}  // namespace statecache::testing
