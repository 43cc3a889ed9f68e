// The step channel (daemon/channel/step_channels.h, client/
// step_channel_client.h) in process, held to Step itself:
//  * twin daemons, built alike, one sent each random pass through
//    StateCache::Step and the other the same pass through its step channel,
//    answer alike: the same StepResponse bytes (epoch included: the twins
//    share it), the same whole-step refusals (code and message, malformed
//    columns included), the same pool, sessions, resizes and counters;
//  * with areas of 4096 bytes, replies larger than the reply area come in
//    parts (kContinue) and still match, and a request larger than the
//    request area is not sent (kNotSent) and never runs, to the byte;
//  * kPing is an empty OK reply that runs nothing;
//  * a session's end (detach, eviction, lease expiry) closes its channel
//    within a few heartbeats, after which a pass is kNotSent; before the
//    daemon notices, a pass gets Step's own refusal;
//  * OpenStepChannel's limits and refusals: max_channels (Opens racing for
//    the last one included), a second channel for a session, reopening
//    after kClose, a peer that may not open one, channels off, the daemon
//    stopping; an unused channel closes after first_request_timeout and a
//    used one does not; a first request sent the moment Open returns is
//    answered;
//  * a hostile client writing into the request area and the control block
//    by hand gets refusals and changes nothing;
//  * a client truncating the shared-memory object does not crash the
//    process (MappingGuard), its channel ends, another session's channel
//    keeps working;
//  * GetStats' step_channels_open / step_channels_opened along the way, an
//    ended channel counted closed exactly once.
// Nothing waits by sleeping: what the channels' heartbeat thread does on
// its own time is polled for, with a deadline.
#include "proto/step_channel.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/step_channel_client.h"
#include "daemon/channel/step_channels.h"
#include "daemon/grpc/rpc_observer.h"
#include "daemon/service/state_cache.h"
#include "gtest/gtest.h"
#include "proto/packed_form.h"
#include "proto/statecache/v1/statecache.pb.h"
#include "tests/service/cache_with_memory.h"
#include "tests/service/fake_clock.h"
#include "tests/service/random_operations.h"
#include "tests/service/raw_step_channel.h"

namespace statecache {
namespace {

namespace sc = step_channel;
using Sent = StepChannelClient::Sent;

constexpr int64_t kSlots = 12;
constexpr int64_t kResizeLimit = 24;
constexpr int kMaxOps = 8;
constexpr int64_t kQuota = 6;
// NewCacheWithMemory's epoch: twins share it, so their responses' bytes do.
constexpr uint64_t kEpoch = 9;
// What the heartbeat thread does is polled for this long at most: far more
// than a few heartbeats of 5 ms, so only a channel that never closes fails.
constexpr absl::Duration kPatience = absl::Seconds(10);

v1::Identity Identity() { return TestIdentity("channel/model"); }

std::unique_ptr<StateCache> NewCache(FakeClock* clock, const std::string& name,
                                     int max_ops = kMaxOps) {
  return NewCacheWithMemory(Identity(), clock, name, kSlots, kResizeLimit,
                            max_ops, kQuota);
}

std::string Attach(StateCache& cache) {
  v1::AttachRequest req;
  *req.mutable_identity() = Identity();
  req.set_client_name("channel-test");
  v1::AttachResponse resp;
  const absl::Status status = cache.Attach(req, &resp);
  EXPECT_TRUE(status.ok()) << status;
  return resp.session_id();
}

// Quick channels: a 5 ms heartbeat; `prefix` names their objects (each
// StepChannels numbers its objects from 0, so two alive at once need two).
StepChannelOptions Options(const std::string& prefix) {
  StepChannelOptions options;
  options.heartbeat = absl::Milliseconds(5);
  options.shm_prefix = prefix;
  return options;
}

absl::StatusOr<v1::OpenStepChannelResponse> Open(
    StepChannels& channels, const std::string& session,
    const Peer& peer = Peer::InProcess()) {
  v1::OpenStepChannelRequest req;
  req.set_session_id(session);
  v1::OpenStepChannelResponse resp;
  absl::Status status = channels.Open(req, &resp, peer);
  if (!status.ok()) return status;
  return resp;
}

// Opens a channel for `session` and maps it as the C++ client does.
std::unique_ptr<StepChannelClient> OpenClient(StepChannels& channels,
                                              const std::string& session) {
  absl::StatusOr<v1::OpenStepChannelResponse> opened = Open(channels, session);
  EXPECT_TRUE(opened.ok()) << opened.status();
  if (!opened.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<StepChannelClient>> client =
      StepChannelClient::Map(*opened);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

// Polls `done` until it holds, for at most `limit`: whether it held. For
// what the channels' heartbeat thread does on its own time; the pause
// between looks only spaces them, nothing relies on it.
bool WaitUntil(const std::function<bool()>& done,
               absl::Duration limit = kPatience) {
  const absl::Time deadline = absl::Now() + limit;
  while (!done()) {
    if (absl::Now() > deadline) return done();
    absl::SleepFor(absl::Microseconds(200));
  }
  return true;
}

struct ChannelCounts {
  int64_t open = 0;
  int64_t opened = 0;
  friend bool operator==(const ChannelCounts&, const ChannelCounts&) = default;
};
ChannelCounts Counts(StateCache& cache) {
  v1::GetStatsResponse stats;
  cache.GetStats(&stats);
  return {stats.step_channels_open(), stats.step_channels_opened()};
}
std::ostream& operator<<(std::ostream& os, const ChannelCounts& c) {
  return os << "{open " << c.open << ", opened " << c.opened << "}";
}

// The counters once the heartbeat thread has reaped what ended: GetStats'
// step_channels_open lags a channel's end by up to a heartbeat.
bool CountsBecome(StateCache& cache, ChannelCounts want) {
  return WaitUntil([&] { return Counts(cache) == want; });
}

// A pass through a channel client, as a status like Step's: the whole
// step's refusal, or OK with `response` filled.
absl::Status ChannelStep(StepChannelClient& client,
                         const v1::PackedOperations& packed,
                         v1::StepResponse* response, Sent* sent) {
  absl::StatusOr<Sent> result = client.Step(packed, response);
  *sent = Sent::kAnswered;
  if (!result.ok()) return result.status();
  *sent = *result;
  return absl::OkStatus();
}

absl::Status DirectStep(StateCache& cache, const std::string& session,
                        const v1::PackedOperations& packed,
                        v1::StepResponse* response) {
  v1::StepRequest req;
  req.set_session_id(session);
  *req.mutable_packed() = packed;
  return cache.Step(req, response);
}

// The request's size in the area by the contract (proto/step_channel.h):
// the header, then args, hashes, kinds, request_id_lengths, request_ids,
// each at the next multiple of 8.
size_t RequestBytes(const v1::PackedOperations& p) {
  size_t at = sc::kHeaderBytes;
  const auto column = [&at](size_t count, size_t width) {
    at = sc::Align8(at) + count * width;
  };
  column(p.args_size(), 8);
  column(p.hashes_size(), 8);
  column(p.kinds_size(), 4);
  column(p.request_id_lengths_size(), 4);
  column(p.request_ids().size(), 1);
  return at;
}

// The request in `area` as the contract reads it, or nothing when a count
// runs past the area's `bytes`: the test's own reading, to hold the
// daemon's to.
std::optional<v1::PackedOperations> ParseRequest(const char* area,
                                                 size_t bytes) {
  sc::RequestHeader h;
  std::memcpy(&h, area, sizeof(h));
  const uint32_t counts[] = {h.args, h.hashes, h.kinds, h.request_id_lengths,
                             h.request_ids};
  const size_t widths[] = {8, 8, 4, 4, 1};
  size_t offsets[5];
  uint64_t at = sc::kHeaderBytes;
  for (int i = 0; i < 5; ++i) {
    const uint64_t start = sc::Align8(at);
    const uint64_t end = start + uint64_t{counts[i]} * widths[i];
    if (end > bytes) return std::nullopt;
    offsets[i] = start;
    at = end;
  }
  v1::PackedOperations p;
  const auto read = [&](int column, size_t index, auto* value) {
    std::memcpy(value, area + offsets[column] + index * sizeof(*value),
                sizeof(*value));
  };
  // Column `column`'s `count` entries of type T, each appended by `add`.
  const auto copy = [&]<typename T>(int column, uint32_t count, auto add) {
    for (uint32_t i = 0; i < count; ++i) {
      T v;
      read(column, i, &v);
      add(v);
    }
  };
  copy.template operator()<int64_t>(0, h.args,
                                    [&](int64_t v) { p.add_args(v); });
  copy.template operator()<int64_t>(1, h.hashes,
                                    [&](int64_t v) { p.add_hashes(v); });
  copy.template operator()<uint32_t>(2, h.kinds,
                                     [&](uint32_t v) { p.add_kinds(v); });
  copy.template operator()<uint32_t>(3, h.request_id_lengths, [&](uint32_t v) {
    p.add_request_id_lengths(v);
  });
  p.set_request_ids(std::string(area + offsets[4], h.request_ids));
  return p;
}

// Writes `packed` into a raw channel's request area by the contract (the
// test's own writer, not WriteStepRequest). REQUIRES: it fits.
void WriteRequest(const v1::PackedOperations& p, RawStepChannel& raw) {
  char* area = raw.request_area();
  sc::RequestHeader h;
  h.command = sc::kStep;
  h.args = p.args_size();
  h.hashes = p.hashes_size();
  h.kinds = p.kinds_size();
  h.request_id_lengths = p.request_id_lengths_size();
  h.request_ids = p.request_ids().size();
  std::memcpy(area, &h, sizeof(h));
  size_t at = sc::kHeaderBytes;
  const auto column = [&](const void* data, size_t size) {
    at = sc::Align8(at);
    if (size > 0) std::memcpy(area + at, data, size);
    at += size;
  };
  column(p.args().data(), p.args_size() * 8);
  column(p.hashes().data(), p.hashes_size() * 8);
  column(p.kinds().data(), p.kinds_size() * 4);
  column(p.request_id_lengths().data(), p.request_id_lengths_size() * 4);
  column(p.request_ids().data(), p.request_ids().size());
}

// Draws a pass of `ops` operations, packed.
v1::PackedOperations DrawPass(Draw& draw, int64_t ops) {
  google::protobuf::RepeatedPtrField<v1::Operation> list;
  for (int64_t k = 0; k < ops; ++k) draw.Operation(list.Add());
  v1::PackedOperations packed;
  EXPECT_TRUE(PackOperations(list, &packed).ok());
  return packed;
}

// Bends one column of `packed`, as a careless or hostile client would:
// mostly into a shape ValidatePackedOperations refuses.
void Spoil(Draw& draw, v1::PackedOperations* p) {
  switch (draw.Below(7)) {
    case 0:
      if (p->kinds_size() > 0) {
        p->set_kinds(static_cast<int>(draw.Below(p->kinds_size())),
                     static_cast<uint32_t>(draw.Pick({0, 16, 17, 99, -1})));
      } else {
        p->add_kinds(0);
      }
      break;
    case 1:
      if (p->args_size() > 0) {
        p->mutable_args()->RemoveLast();
      } else {
        p->add_args(3);
      }
      break;
    case 2:
      p->add_args(draw.Below(3));
      break;
    case 3:
      if (p->hashes_size() > 0) {
        p->mutable_hashes()->RemoveLast();
      } else {
        p->add_hashes(1);
      }
      break;
    case 4:
      if (p->request_id_lengths_size() > 0) {
        p->set_request_id_lengths(
            static_cast<int>(draw.Below(p->request_id_lengths_size())),
            static_cast<uint32_t>(draw.Pick({1000, -1})));
      } else {
        p->add_request_id_lengths(3);
      }
      break;
    case 5:
      p->mutable_request_ids()->push_back('x');
      break;
    case 6:
      if (p->args_size() > 0) {
        p->set_args(static_cast<int>(draw.Below(p->args_size())),
                    draw.Pick({-1, int64_t{1} << 40, 2}));
      } else {
        p->add_kinds(v1::Operation::kBeginPass);
        p->add_args(1);
      }
      break;
  }
}

// What the twins must agree on besides the responses: the pool, the
// sessions (their ids aside), and the counters (the channels' own aside).
std::string State(StateCache& cache, const std::string& session) {
  v1::GetStatsResponse stats;
  cache.GetStats(&stats);
  stats.clear_uptime_seconds();
  stats.clear_step_channels_open();
  stats.clear_step_channels_opened();
  stats.clear_layout_name();  // each twin's own
  v1::ListSessionsRequest list;
  list.set_page_size(100);
  v1::ListSessionsResponse sessions;
  EXPECT_TRUE(cache.ListSessions(list, &sessions).ok());
  std::string out = stats.ShortDebugString();
  for (const v1::SessionInfo& s : sessions.sessions()) {
    absl::StrAppend(&out, " | ", s.handle(), " requests=", s.requests(),
                    " slots=", s.slots(), " pins=", s.pins());
  }
  absl::StrAppend(&out, "\n",
                  absl::StrReplaceAll(cache.DebugDump(), {{session, "S"}}));
  return out;
}

// Resize outcomes in the order `done` ran (for the served twin, on its
// channel's thread).
class ResizeLog {
 public:
  ResizeDone Record() {
    return [this](absl::Status status, const v1::ResizeResponse& resp) {
      absl::MutexLock lock(&mu_);
      outcomes_.push_back(
          absl::StrCat(status.ToString(), " ", resp.ShortDebugString()));
    };
  }
  std::vector<std::string> outcomes() const {
    absl::MutexLock lock(&mu_);
    return outcomes_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> outcomes_;
};

// The channels' reports to the RPC metrics: their Steps by code.
class CountingObserver : public RpcObserver {
 public:
  void OnRpc(RpcMethod method, absl::StatusCode code, double) override {
    absl::MutexLock lock(&mu_);
    ++calls_[{method, code}];
  }
  int64_t count(RpcMethod method, absl::StatusCode code) const {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find({method, code});
    return it == calls_.end() ? 0 : it->second;
  }
  int64_t total() const {
    absl::MutexLock lock(&mu_);
    int64_t n = 0;
    for (const auto& [key, count] : calls_) n += count;
    return n;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::pair<RpcMethod, absl::StatusCode>, int64_t> calls_;
};

// Twin caches, one session each, the second served through a channel.
struct Twins {
  explicit Twins(const std::string& name, int max_ops = kMaxOps,
                 std::optional<StepChannelOptions> options = std::nullopt)
      : direct(NewCache(&clock, name + "_direct", max_ops)),
        served(NewCache(&clock, name + "_served", max_ops)),
        direct_session(Attach(*direct)),
        served_session(Attach(*served)),
        channels(served.get(), options ? *options : Options(name), &observer) {}

  // Runs `packed` on both, the served twin through `client`; fails the
  // test when they answer differently. The direct twin's status.
  absl::Status Both(StepChannelClient& client,
                    const v1::PackedOperations& packed,
                    v1::StepResponse* direct_resp) {
    const absl::Status direct_status =
        DirectStep(*direct, direct_session, packed, direct_resp);
    v1::StepResponse served_resp;
    Sent sent;
    const absl::Status served_status =
        ChannelStep(client, packed, &served_resp, &sent);
    EXPECT_EQ(sent, Sent::kAnswered);
    EXPECT_EQ(served_status.code(), direct_status.code())
        << served_status << " vs " << direct_status;
    EXPECT_EQ(served_status.message(), direct_status.message());
    EXPECT_EQ(served_resp.SerializeAsString(), direct_resp->SerializeAsString())
        << "channel: " << served_resp.ShortDebugString()
        << "\ndirect:  " << direct_resp->ShortDebugString();
    if (direct_status.ok()) {
      EXPECT_EQ(served_resp.epoch(), kEpoch);
    }
    return direct_status;
  }

  bool Agree() {
    EXPECT_EQ(direct->DumpPool(), served->DumpPool());
    EXPECT_EQ(State(*direct, direct_session), State(*served, served_session));
    EXPECT_EQ(direct_resizes.outcomes(), served_resizes.outcomes());
    return !::testing::Test::HasFailure();
  }

  FakeClock clock;
  // Before the caches: a resize still pending at the end is answered by
  // ~StateCache.
  ResizeLog direct_resizes;
  ResizeLog served_resizes;
  CountingObserver observer;
  std::unique_ptr<StateCache> direct;
  std::unique_ptr<StateCache> served;
  std::string direct_session;
  std::string served_session;
  StepChannels channels;  // first to go: its threads use the rest
};

TEST(StepChannelInProcessTest,
     TwinsAnswerAlikeThroughTheChannelAndThroughStep) {
  Twins twins("chan_twin");
  ASSERT_NE(twins.direct, nullptr);
  ASSERT_NE(twins.served, nullptr);
  std::unique_ptr<StepChannelClient> client =
      OpenClient(twins.channels, twins.served_session);
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(Counts(*twins.served), (ChannelCounts{1, 1}));

  Draw draw(20261201);
  int64_t steps = 0, ok_results = 0, refused_results = 0, empty = 0;
  int64_t too_many = 0, malformed = 0, resizes = 0, ticks = 0;
  for (int pass = 0; pass < 4000; ++pass) {
    SCOPED_TRACE(absl::StrCat("pass ", pass));
    if (draw.Chance(2)) {  // an operator resizes both alike
      v1::ResizeRequest req;
      req.set_target_slots(draw.Pick({-1, 4, 8, 12, 16, 24, 25}));
      req.set_deadline_ms(draw.Pick({0, 5000}));
      twins.direct->Resize(req, twins.direct_resizes.Record());
      twins.served->Resize(req, twins.served_resizes.Record());
      ++resizes;
    }
    if (draw.Chance(2)) {  // time passes alike for both
      // (Never past a lease between two Steps that renew it: the channel
      // would close with its session.)
      twins.clock.Advance(absl::Seconds(draw.Pick({1, 3})));
      twins.direct->Tick();
      twins.served->Tick();
      ++ticks;
    }
    const int64_t ops = draw.Chance(3)   ? kMaxOps + 1
                        : draw.Chance(3) ? 0
                                         : 1 + draw.Below(kMaxOps);
    v1::PackedOperations packed = DrawPass(draw, ops);
    const bool spoiled = draw.Chance(8);
    if (spoiled) Spoil(draw, &packed);
    v1::StepResponse resp;
    const absl::Status status = twins.Both(*client, packed, &resp);
    ++steps;
    if (status.ok()) {
      empty += packed.kinds_size() == 0;
      for (uint32_t code : resp.packed_results().codes()) {
        (code == 0 ? ok_results : refused_results) += 1;
      }
    } else {
      EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
      (absl::StrContains(status.message(), "operations; at most")
           ? too_many
           : malformed) += 1;
    }
    ASSERT_TRUE(twins.Agree());
    if (pass % 256 == 0) {
      ASSERT_TRUE(twins.direct->CheckInvariants().ok());
      ASSERT_TRUE(twins.served->CheckInvariants().ok());
    }
  }
  // Every Step through the channel was reported once, with its code, and
  // nothing else was.
  EXPECT_EQ(
      twins.observer.count(RpcMethod::kStepChannel, absl::StatusCode::kOk),
      steps - too_many - malformed);
  EXPECT_EQ(twins.observer.count(RpcMethod::kStepChannel,
                                 absl::StatusCode::kInvalidArgument),
            too_many + malformed);
  EXPECT_EQ(twins.observer.total(), steps);
  // Still the one channel, never closed on the way.
  EXPECT_FALSE(client->closed());
  EXPECT_EQ(Counts(*twins.served), (ChannelCounts{1, 1}));
  EXPECT_EQ(Counts(*twins.direct), (ChannelCounts{0, 0}));
  // The run reached what it is meant to compare.
  EXPECT_GT(ok_results, 3000);
  EXPECT_GT(refused_results, 3000);
  EXPECT_GT(empty, 50);
  EXPECT_GT(too_many, 60);
  EXPECT_GT(malformed, 150);
  EXPECT_GT(resizes, 40);
  EXPECT_GT(ticks, 40);
  EXPECT_GT(twins.direct_resizes.outcomes().size(), 30u);
  v1::GetStatsResponse stats;
  twins.served->GetStats(&stats);
  EXPECT_GT(stats.checkpoints_kept(), 50) << stats.ShortDebugString();
  EXPECT_GT(stats.resumes_fork(), 5) << stats.ShortDebugString();
  RecordProperty("steps", static_cast<int>(steps));
  RecordProperty("malformed", static_cast<int>(malformed));
}

// Areas of 4096 bytes (the smallest allowed): a reply larger than the reply
// area comes in parts and still matches Step's to the byte; a request
// larger than the request area is kNotSent, and nothing of it runs (the
// client would send it over gRPC: here, Step on the served twin).
TEST(StepChannelInProcessTest,
     TinyAreasSendRepliesInPartsAndRefuseBigRequests) {
  StepChannelOptions options = Options("chan_tiny");
  options.request_area_bytes = 4096;
  options.reply_area_bytes = 4096;
  constexpr int kManyOps = 400;
  Twins twins("chan_tiny", kManyOps, options);
  ASSERT_NE(twins.direct, nullptr);
  ASSERT_NE(twins.served, nullptr);
  std::unique_ptr<StepChannelClient> client =
      OpenClient(twins.channels, twins.served_session);
  ASSERT_NE(client, nullptr);

  // The request area's edge: a request of exactly 4096 bytes is sent (and
  // refused whole by Step: ids no operation uses), one byte more is not.
  {
    v1::PackedOperations edge;
    edge.set_request_ids(std::string(4096 - sc::kHeaderBytes, 'x'));
    ASSERT_EQ(RequestBytes(edge), 4096u);
    v1::StepResponse resp;
    const absl::Status status = twins.Both(*client, edge, &resp);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
    edge.mutable_request_ids()->push_back('x');
    Sent sent;
    const std::string before = Visible(*twins.served);
    EXPECT_TRUE(ChannelStep(*client, edge, &resp, &sent).ok());
    EXPECT_EQ(sent, Sent::kNotSent);
    EXPECT_EQ(Visible(*twins.served), before);
  }

  Draw draw(20261202);
  int64_t not_sent = 0, answered = 0, in_parts = 0, in_many_parts = 0;
  std::string reply;
  for (int pass = 0; pass < 1500; ++pass) {
    SCOPED_TRACE(absl::StrCat("pass ", pass));
    v1::PackedOperations packed;
    if (draw.Chance(50)) {
      // Random operations, often too many for the area.
      packed = DrawPass(draw, draw.Below(300));
    } else {
      // Small requests with long replies: operations on requests this
      // session may not hold, each refused with a message, and lookups.
      google::protobuf::RepeatedPtrField<v1::Operation> list;
      for (int64_t k = 100 + draw.Below(200); k > 0; --k) {
        v1::Operation* op = list.Add();
        const std::string id = absl::StrCat("r", draw.Below(5));
        switch (draw.Below(4)) {
          case 0:
            op->mutable_release()->set_request_id(id);
            break;
          case 1:
            op->mutable_consume_fork()->set_request_id(id);
            break;
          case 2:
            op->mutable_cancel()->set_request_id(id);
            break;
          default:
            op->mutable_lookup()->set_hash(draw.Below(16));
            break;
        }
      }
      ASSERT_TRUE(PackOperations(list, &packed).ok());
    }
    const bool fits = RequestBytes(packed) <= options.request_area_bytes;
    v1::StepResponse direct_resp;
    if (fits) {
      const absl::Status status = twins.Both(*client, packed, &direct_resp);
      ++answered;
      sc::EncodeReply(status, direct_resp, &reply);
      in_parts += reply.size() > options.reply_area_bytes;
      in_many_parts += reply.size() > 2 * options.reply_area_bytes;
    } else {
      const std::string before = Visible(*twins.served);
      v1::StepResponse served_resp;
      Sent sent;
      EXPECT_TRUE(ChannelStep(*client, packed, &served_resp, &sent).ok());
      ASSERT_EQ(sent, Sent::kNotSent);
      ++not_sent;
      ASSERT_EQ(Visible(*twins.served), before) << "a pass not sent ran";
      // The client's fallback, over gRPC: Step itself.
      const absl::Status direct_status =
          DirectStep(*twins.direct, twins.direct_session, packed, &direct_resp);
      const absl::Status served_status =
          DirectStep(*twins.served, twins.served_session, packed, &served_resp);
      EXPECT_EQ(served_status, direct_status);
      EXPECT_EQ(served_resp.SerializeAsString(),
                direct_resp.SerializeAsString());
    }
    ASSERT_TRUE(twins.Agree());
  }
  EXPECT_FALSE(client->closed());
  EXPECT_GT(not_sent, 300);
  EXPECT_GT(answered, 500);
  EXPECT_GT(in_parts, 300);
  EXPECT_GT(in_many_parts, 100);
  ASSERT_TRUE(twins.served->CheckInvariants().ok());
  RecordProperty("replies_in_parts", static_cast<int>(in_parts));
  RecordProperty("requests_not_sent", static_cast<int>(not_sent));
}

TEST(StepChannelInProcessTest, PingIsAnEmptyOkReplyThatRunsNothing) {
  FakeClock clock;
  std::unique_ptr<StateCache> cache = NewCache(&clock, "chan_ping_cache");
  ASSERT_NE(cache, nullptr);
  const std::string session = Attach(*cache);
  CountingObserver observer;
  StepChannels channels(cache.get(), Options("chan_ping"), &observer);
  absl::StatusOr<v1::OpenStepChannelResponse> opened = Open(channels, session);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<RawStepChannel> raw = RawStepChannel::Map(*opened);
  ASSERT_NE(raw, nullptr);
  absl::StatusOr<std::unique_ptr<StepChannelClient>> client =
      StepChannelClient::Map(*opened);
  ASSERT_TRUE(client.ok()) << client.status();

  const std::string before = Visible(*cache);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE((*client)->Ping().ok());
  // By hand: the reply is a bare header, OK, nothing in it.
  ASSERT_EQ(raw->Send(sc::kPing, kPatience), RawStepChannel::Answer::kReplied);
  const sc::ReplyHeader header = raw->reply_header();
  EXPECT_EQ(header.status, 0u);
  EXPECT_EQ(header.total_bytes, sc::kHeaderBytes);
  EXPECT_EQ(header.codes + header.values + header.late_values + header.hashes +
                header.request_id_lengths + header.request_ids +
                header.messages + header.message_bytes + header.status_message,
            0u);
  EXPECT_EQ(Visible(*cache), before);
  EXPECT_EQ(observer.total(), 0) << "a ping was reported as a Step";
  // A Step is one, and the client then pings again.
  v1::StepResponse resp;
  Sent sent;
  Draw draw(1);
  ASSERT_TRUE(ChannelStep(**client, DrawPass(draw, 0), &resp, &sent).ok());
  EXPECT_EQ(sent, Sent::kAnswered);
  EXPECT_EQ(resp.epoch(), kEpoch);
  EXPECT_EQ(observer.count(RpcMethod::kStepChannel, absl::StatusCode::kOk), 1);
  EXPECT_TRUE((*client)->Ping().ok());
  EXPECT_EQ(observer.total(), 1);
}

// How a session ends, on the served cache.
enum class End { kDetach, kEvict, kLeaseExpiry };

void EndSession(End how, StateCache& cache, FakeClock& clock,
                const std::string& session) {
  switch (how) {
    case End::kDetach: {
      v1::DetachRequest req;
      req.set_session_id(session);
      v1::DetachResponse resp;
      ASSERT_TRUE(cache.Detach(req, &resp).ok());
      break;
    }
    case End::kEvict: {
      v1::EvictSessionRequest req;
      req.set_session_id(session);
      v1::EvictSessionResponse resp;
      ASSERT_TRUE(cache.EvictSession(req, &resp).ok());
      break;
    }
    case End::kLeaseExpiry:
      clock.Advance(absl::Seconds(11));
      cache.Tick();
      break;
  }
}

TEST(StepChannelInProcessTest, ASessionsEndClosesItsChannelWithinHeartbeats) {
  FakeClock clock;
  std::unique_ptr<StateCache> cache = NewCache(&clock, "chan_end_cache");
  ASSERT_NE(cache, nullptr);
  StepChannels channels(cache.get(), Options("chan_end"), nullptr);
  int64_t opened = 0;
  for (End how : {End::kDetach, End::kEvict, End::kLeaseExpiry}) {
    SCOPED_TRACE(static_cast<int>(how));
    const std::string session = Attach(*cache);
    // A bystander whose channel must stay open (at kLeaseExpiry its lease
    // lapses too, and it attaches again).
    const std::string bystander = Attach(*cache);
    std::unique_ptr<StepChannelClient> client = OpenClient(channels, session);
    std::unique_ptr<StepChannelClient> other = OpenClient(channels, bystander);
    ASSERT_NE(client, nullptr);
    ASSERT_NE(other, nullptr);
    opened += 2;
    EXPECT_EQ(Counts(*cache), (ChannelCounts{2, opened}));
    Draw draw(static_cast<uint64_t>(opened));
    v1::StepResponse resp;
    Sent sent;
    ASSERT_TRUE(ChannelStep(*client, DrawPass(draw, 3), &resp, &sent).ok());
    ASSERT_EQ(sent, Sent::kAnswered);

    const absl::Time ended = absl::Now();
    EndSession(how, *cache, clock, session);
    if (how == End::kLeaseExpiry) {
      // The bystander's lease lapsed too: it attaches again, as a client
      // does, and its old channel closes with its old session.
      ASSERT_TRUE(WaitUntil([&] { return other->closed(); }));
      other.reset();
      other = OpenClient(channels, Attach(*cache));
      ASSERT_NE(other, nullptr);
      ++opened;
    }
    ASSERT_TRUE(WaitUntil([&] { return client->closed(); }))
        << "the channel outlived its session";
    // Within a few heartbeats of 5 ms (a second is two hundred: slack for a
    // loaded machine, not for a daemon that looks less often).
    EXPECT_LT(absl::Now() - ended, absl::Seconds(1));
    RecordProperty(
        absl::StrCat("closed_after_us_", static_cast<int>(how)),
        static_cast<int>(absl::ToInt64Microseconds(absl::Now() - ended)));
    // Closed: a pass is not sent (the client falls back to gRPC, which
    // says NOT_FOUND), a ping is refused; the other channel still serves.
    ASSERT_TRUE(ChannelStep(*client, DrawPass(draw, 3), &resp, &sent).ok());
    EXPECT_EQ(sent, Sent::kNotSent);
    EXPECT_TRUE(absl::IsFailedPrecondition(client->Ping()));
    EXPECT_TRUE(other->Ping().ok());
    EXPECT_FALSE(other->closed());
    EXPECT_TRUE(CountsBecome(*cache, {1, opened})) << Counts(*cache);
    EXPECT_EQ(channels.open(), 1);
    client.reset();  // closed already: sends nothing
    other.reset();   // kClose
    EXPECT_TRUE(CountsBecome(*cache, {0, opened})) << Counts(*cache);
    EXPECT_TRUE(cache->CheckInvariants().ok());
  }
}

// Until the daemon notices a session's end (a heartbeat of 10 s here: not
// during this test), a pass on its channel runs into Step's own refusal,
// as it would over gRPC.
TEST(StepChannelInProcessTest, BeforeTheDaemonNoticesAPassGetsStepsRefusal) {
  StepChannelOptions options = Options("chan_notice");
  options.heartbeat = absl::Seconds(10);
  Twins twins("chan_notice", kMaxOps, options);
  ASSERT_NE(twins.direct, nullptr);
  std::unique_ptr<StepChannelClient> client =
      OpenClient(twins.channels, twins.served_session);
  ASSERT_NE(client, nullptr);
  Draw draw(3);
  v1::StepResponse direct_resp, served_resp;
  const v1::PackedOperations pass = DrawPass(draw, 2);
  ASSERT_TRUE(twins.Both(*client, pass, &direct_resp).ok());
  for (StateCache* cache : {twins.direct.get(), twins.served.get()}) {
    v1::DetachRequest req;
    req.set_session_id(cache == twins.direct.get() ? twins.direct_session
                                                   : twins.served_session);
    v1::DetachResponse resp;
    ASSERT_TRUE(cache->Detach(req, &resp).ok());
  }
  // (Fresh responses: Step leaves a refused one as it found it.)
  direct_resp.Clear();
  const absl::Status direct_status =
      DirectStep(*twins.direct, twins.direct_session, pass, &direct_resp);
  Sent sent;
  const absl::Status served_status =
      ChannelStep(*client, pass, &served_resp, &sent);
  ASSERT_TRUE(absl::IsNotFound(direct_status)) << direct_status;
  EXPECT_EQ(sent, Sent::kAnswered);
  EXPECT_EQ(served_status.code(), direct_status.code());
  // The message names the session: each twin its own.
  EXPECT_EQ(absl::StrReplaceAll(served_status.message(),
                                {{twins.served_session, "S"}}),
            absl::StrReplaceAll(direct_status.message(),
                                {{twins.direct_session, "S"}}));
  EXPECT_EQ(served_resp.SerializeAsString(), direct_resp.SerializeAsString());
  EXPECT_FALSE(client->closed());
}

// A client may send its first request the moment Open returns, before the
// channel's thread has first looked at the control block: it is answered
// (not lost, leaving the client to wait until first_request_timeout closes
// the channel as unused).
TEST(StepChannelInProcessTest, AFirstRequestRightAfterOpenIsAnswered) {
  FakeClock clock;
  std::unique_ptr<StateCache> cache = NewCache(&clock, "chan_first_cache");
  ASSERT_NE(cache, nullptr);
  StepChannelOptions options = Options("chan_first");
  options.first_request_timeout = absl::Milliseconds(200);
  options.max_channels = 4096;
  StepChannels channels(cache.get(), options, nullptr);
  for (int round = 0; round < 300; ++round) {
    const std::string session = Attach(*cache);
    std::unique_ptr<StepChannelClient> client = OpenClient(channels, session);
    ASSERT_NE(client, nullptr);
    const absl::Status pinged = client->Ping();
    ASSERT_TRUE(pinged.ok()) << "round " << round << ": " << pinged;
    client.reset();
    v1::DetachRequest req;
    req.set_session_id(session);
    v1::DetachResponse resp;
    ASSERT_TRUE(cache->Detach(req, &resp).ok());
  }
}

TEST(StepChannelInProcessTest, OpenRefusesBeyondItsLimitsAndReopensAfterClose) {
  FakeClock clock;
  std::unique_ptr<StateCache> cache = NewCache(&clock, "chan_limit_cache");
  ASSERT_NE(cache, nullptr);
  StepChannelOptions options = Options("chan_limit");
  options.max_channels = 2;
  StepChannels channels(cache.get(), options, nullptr);
  const std::string s1 = Attach(*cache), s2 = Attach(*cache),
                    s3 = Attach(*cache);

  std::unique_ptr<StepChannelClient> c1 = OpenClient(channels, s1);
  ASSERT_NE(c1, nullptr);
  EXPECT_EQ(Counts(*cache), (ChannelCounts{1, 1}));
  std::unique_ptr<StepChannelClient> c2 = OpenClient(channels, s2);
  ASSERT_NE(c2, nullptr);
  EXPECT_EQ(Counts(*cache), (ChannelCounts{2, 2}));

  absl::StatusOr<v1::OpenStepChannelResponse> refused = Open(channels, s3);
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  refused = Open(channels, s1);
  EXPECT_TRUE(absl::IsAlreadyExists(refused.status())) << refused.status();
  EXPECT_EQ(Counts(*cache), (ChannelCounts{2, 2}));
  EXPECT_EQ(channels.open(), 2);
  // Neither refusal touched the open channels.
  EXPECT_TRUE(c1->Ping().ok());
  EXPECT_TRUE(c2->Ping().ok());

  // kClose (the client's destructor); once the daemon has served it, the
  // session may open a channel again, and so, a slot being free, may s3.
  c1.reset();
  ASSERT_TRUE(WaitUntil([&] { return channels.open() == 1; }));
  EXPECT_TRUE(CountsBecome(*cache, {1, 2})) << Counts(*cache);
  c1 = OpenClient(channels, s1);
  ASSERT_NE(c1, nullptr);
  EXPECT_EQ(Counts(*cache), (ChannelCounts{2, 3}));
  Draw draw(4);
  v1::StepResponse resp;
  Sent sent;
  ASSERT_TRUE(ChannelStep(*c1, DrawPass(draw, 4), &resp, &sent).ok());
  EXPECT_EQ(sent, Sent::kAnswered);
  refused = Open(channels, s3);
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  c2.reset();
  ASSERT_TRUE(WaitUntil([&] { return channels.open() == 1; }));
  std::unique_ptr<StepChannelClient> c3 = OpenClient(channels, s3);
  ASSERT_NE(c3, nullptr);
  EXPECT_TRUE(c3->Ping().ok());
  EXPECT_TRUE(CountsBecome(*cache, {2, 4})) << Counts(*cache);

  // Who may not open one: an unknown session, another principal, a peer
  // not on this host.
  refused = Open(channels, "no-such-session");
  EXPECT_TRUE(absl::IsNotFound(refused.status())) << refused.status();
  refused = Open(channels, s2, Peer::Local(::getuid() + 1, 0, 1));
  EXPECT_TRUE(absl::IsPermissionDenied(refused.status())) << refused.status();
  refused = Open(channels, s2, Peer::Anonymous());
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_EQ(Counts(*cache), (ChannelCounts{2, 4}));

  // Stopping: every channel closes at once, and no new one opens.
  channels.CloseAll();
  EXPECT_TRUE(c1->closed());
  EXPECT_TRUE(c3->closed());
  EXPECT_EQ(Counts(*cache), (ChannelCounts{0, 4}));
  refused = Open(channels, s2);
  EXPECT_TRUE(absl::IsUnavailable(refused.status())) << refused.status();
  EXPECT_EQ(channels.open(), 0);

  // Channels off.
  StepChannelOptions off = Options("chan_limit_off");
  off.max_channels = 0;
  StepChannels none(cache.get(), off, nullptr);
  refused = Open(none, s2);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_EQ(Counts(*cache), (ChannelCounts{0, 4}));
}

// A session's channel ended (kClose) but not yet reaped (a heartbeat of
// 10 s: never during this test): an Open of the session refused for the
// limit leaves the ended channel to be counted closed when it is reaped,
// and one that succeeds counts it closed itself; either way exactly once.
TEST(StepChannelInProcessTest, AReopenRefusedForTheLimitKeepsTheCountsRight) {
  FakeClock clock;
  std::unique_ptr<StateCache> cache = NewCache(&clock, "chan_recount_cache");
  ASSERT_NE(cache, nullptr);
  StepChannelOptions options = Options("chan_recount");
  options.heartbeat = absl::Seconds(10);
  options.max_channels = 2;
  StepChannels channels(cache.get(), options, nullptr);
  const std::string s1 = Attach(*cache), s2 = Attach(*cache),
                    s3 = Attach(*cache);
  std::unique_ptr<StepChannelClient> c1 = OpenClient(channels, s1);
  std::unique_ptr<StepChannelClient> c2 = OpenClient(channels, s2);
  ASSERT_NE(c1, nullptr);
  ASSERT_NE(c2, nullptr);
  c1.reset();  // kClose: s1's channel ends, and stays until reaped
  ASSERT_TRUE(WaitUntil([&] { return channels.open() == 1; }));
  EXPECT_EQ(Counts(*cache), (ChannelCounts{2, 2}));
  std::unique_ptr<StepChannelClient> c3 = OpenClient(channels, s3);
  ASSERT_NE(c3, nullptr);
  EXPECT_EQ(Counts(*cache), (ChannelCounts{3, 3}));
  absl::StatusOr<v1::OpenStepChannelResponse> refused = Open(channels, s1);
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_EQ(Counts(*cache), (ChannelCounts{3, 3}));
  c2.reset();
  ASSERT_TRUE(WaitUntil([&] { return channels.open() == 1; }));
  // s1 again: its ended channel is counted closed, its new one open.
  c1 = OpenClient(channels, s1);
  ASSERT_NE(c1, nullptr);
  EXPECT_TRUE(c1->Ping().ok());
  EXPECT_EQ(Counts(*cache), (ChannelCounts{3, 4}));
  channels.CloseAll();
  EXPECT_EQ(Counts(*cache), (ChannelCounts{0, 4}));
}

// Opens racing for the last channel: exactly max_channels of them get one.
TEST(StepChannelInProcessTest, RacingOpensNeverExceedMaxChannels) {
  FakeClock clock;
  std::unique_ptr<StateCache> cache = NewCache(&clock, "chan_race_cache");
  ASSERT_NE(cache, nullptr);
  constexpr int kRacers = 4;
  std::vector<std::string> sessions;
  for (int i = 0; i < kRacers; ++i) sessions.push_back(Attach(*cache));
  int64_t opened = 0;
  for (int round = 0; round < 100; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    StepChannelOptions options = Options(absl::StrCat("chan_race", round));
    options.max_channels = 1;
    StepChannels channels(cache.get(), options, nullptr);
    std::atomic<int> ready{0};
    std::atomic<int> granted{0};
    std::vector<std::thread> racers;
    for (int i = 0; i < kRacers; ++i) {
      racers.emplace_back([&, i] {
        ready.fetch_add(1);
        while (ready.load() < kRacers) {
        }
        absl::StatusOr<v1::OpenStepChannelResponse> got =
            Open(channels, sessions[i]);
        if (got.ok()) {
          granted.fetch_add(1);
        } else {
          EXPECT_TRUE(absl::IsResourceExhausted(got.status())) << got.status();
        }
      });
    }
    for (std::thread& t : racers) t.join();
    opened += granted.load();
    ASSERT_EQ(granted.load(), 1);
    EXPECT_EQ(channels.open(), 1);
    EXPECT_EQ(Counts(*cache), (ChannelCounts{1, opened}));
    channels.CloseAll();
    EXPECT_EQ(Counts(*cache), (ChannelCounts{0, opened}));
  }
}

TEST(StepChannelInProcessTest,
     AnUnusedChannelClosesAfterTheFirstRequestTimeout) {
  FakeClock clock;
  std::unique_ptr<StateCache> cache = NewCache(&clock, "chan_idle_cache");
  ASSERT_NE(cache, nullptr);
  const std::string idle = Attach(*cache), used = Attach(*cache);
  // Tiny: the idle channel closes at the first heartbeat, and its object's
  // name is gone with it.
  {
    StepChannelOptions options = Options("chan_idle_tiny");
    options.first_request_timeout = absl::Milliseconds(1);
    StepChannels channels(cache.get(), options, nullptr);
    absl::StatusOr<v1::OpenStepChannelResponse> opened = Open(channels, idle);
    ASSERT_TRUE(opened.ok()) << opened.status();
    EXPECT_EQ(Counts(*cache), (ChannelCounts{1, 1}));
    ASSERT_TRUE(WaitUntil([&] { return channels.open() == 0; }));
    EXPECT_TRUE(CountsBecome(*cache, {0, 1})) << Counts(*cache);
    // (Unlinked as the reaped channel is destroyed, just after the count.)
    EXPECT_TRUE(WaitUntil([&] {
      const int fd = ::shm_open(opened->shm_name().c_str(), O_RDWR, 0);
      if (fd < 0) return errno == ENOENT;
      ::close(fd);
      return false;
    })) << opened->shm_name()
        << " is left behind";
    // The session may open another.
    absl::StatusOr<v1::OpenStepChannelResponse> again = Open(channels, idle);
    EXPECT_TRUE(again.ok()) << again.status();
  }
  // Long enough to use one channel first: the used one stays, the idle one
  // goes, and not before its time.
  {
    const absl::Duration timeout = absl::Seconds(1);
    StepChannelOptions options = Options("chan_idle_long");
    options.first_request_timeout = timeout;
    StepChannels channels(cache.get(), options, nullptr);
    const absl::Time start = absl::Now();
    std::unique_ptr<StepChannelClient> client = OpenClient(channels, used);
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(client->Ping().ok());
    absl::StatusOr<v1::OpenStepChannelResponse> opened = Open(channels, idle);
    ASSERT_TRUE(opened.ok()) << opened.status();
    std::unique_ptr<RawStepChannel> raw = RawStepChannel::Map(*opened);
    ASSERT_NE(raw, nullptr);
    ASSERT_TRUE(raw->WaitClosed(kPatience));
    EXPECT_GE(absl::Now() - start, timeout);
    EXPECT_TRUE(WaitUntil([&] { return channels.open() == 1; }));
    EXPECT_FALSE(client->closed());
    EXPECT_TRUE(client->Ping().ok());
  }
}

// A client writing requests by hand into a raw mapping of its channel.
class Hostile {
 public:
  explicit Hostile(RawStepChannel& raw) : raw_(raw) {}

  // Publishes the request area as it stands; the whole reply's status.
  absl::Status Publish() {
    const RawStepChannel::Answer answer = raw_.Wait(raw_.Publish(), kPatience);
    EXPECT_EQ(answer, RawStepChannel::Answer::kReplied);
    const std::string reply = raw_.ReadReply(kPatience);
    EXPECT_FALSE(reply.empty()) << "a reply of a bad length";
    v1::StepResponse resp;
    return sc::DecodeReply(reply, &resp);
  }
  // `header`, over what the area holds after it.
  absl::Status Send(const sc::RequestHeader& header) {
    std::memcpy(raw_.request_area(), &header, sizeof(header));
    return Publish();
  }

 private:
  RawStepChannel& raw_;
};

TEST(StepChannelInProcessTest, AHostileClientGetsRefusalsAndChangesNothing) {
  StepChannelOptions options = Options("chan_hostile");
  options.request_area_bytes = 8192;
  options.reply_area_bytes = 4096;
  Twins twins("chan_hostile", kMaxOps, options);
  ASSERT_NE(twins.direct, nullptr);
  absl::StatusOr<v1::OpenStepChannelResponse> opened =
      Open(twins.channels, twins.served_session);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<RawStepChannel> raw = RawStepChannel::Map(*opened);
  ASSERT_NE(raw, nullptr);
  ASSERT_EQ(raw->request_bytes(), 8192u);
  absl::StatusOr<std::unique_ptr<StepChannelClient>> mapped =
      StepChannelClient::Map(*opened);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  StepChannelClient& client = **mapped;

  // Something to protect: both twins hold requests, pins and checkpoints.
  Draw draw(20261203);
  for (int pass = 0; pass < 200; ++pass) {
    v1::StepResponse resp;
    (void)twins.Both(client, DrawPass(draw, 1 + draw.Below(kMaxOps)), &resp);
  }
  ASSERT_TRUE(twins.Agree());
  v1::GetStatsResponse held;
  twins.served->GetStats(&held);
  ASSERT_GT(held.requests(), 0) << held.ShortDebugString();
  ASSERT_GT(held.indexed_hashes(), 0) << held.ShortDebugString();
  const std::string before = Visible(*twins.served);
  Hostile hostile(*raw);
  const auto unchanged = [&] {
    EXPECT_EQ(Visible(*twins.served), before);
    const absl::Status invariants = twins.served->CheckInvariants();
    EXPECT_TRUE(invariants.ok()) << invariants;
  };
  const size_t area = raw->request_bytes();

  // Unknown commands.
  for (uint32_t command : {0u, 5u, 99u, 0x80000001u, 0xffffffffu}) {
    sc::RequestHeader h;
    h.command = command;
    const absl::Status status = hostile.Send(h);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
    EXPECT_EQ(status.message(),
              absl::StrCat("step channel: unknown command ", command));
    unchanged();
  }
  // kContinue with no reply in parts pending.
  {
    sc::RequestHeader h;
    h.command = sc::kContinue;
    const absl::Status status = hostile.Send(h);
    EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
    unchanged();
  }
  // Counts past the area, each column alone and at its edge: one entry
  // less than the overrun fits and reaches Step's own validation.
  struct Column {
    const char* name;
    uint32_t sc::RequestHeader::*count;
    size_t width;
  };
  const Column columns[] = {
      {"args", &sc::RequestHeader::args, 8},
      {"hashes", &sc::RequestHeader::hashes, 8},
      {"kinds", &sc::RequestHeader::kinds, 4},
      {"request_id_lengths", &sc::RequestHeader::request_id_lengths, 4},
      {"request_ids", &sc::RequestHeader::request_ids, 1},
  };
  std::memset(raw->request_area(), 0, area);
  for (const Column& column : columns) {
    SCOPED_TRACE(column.name);
    const uint32_t fits =
        static_cast<uint32_t>((area - sc::kHeaderBytes) / column.width);
    for (uint32_t count : {fits + 1, fits + 1000, 0x40000000u, 0xffffffffu}) {
      sc::RequestHeader h;
      h.command = sc::kStep;
      h.*column.count = count;
      const absl::Status status = hostile.Send(h);
      EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
      EXPECT_TRUE(absl::StrContains(status.message(), "overrun"))
          << status.message();
      unchanged();
    }
    sc::RequestHeader h;
    h.command = sc::kStep;
    h.*column.count = fits;
    const absl::Status status = hostile.Send(h);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
    EXPECT_FALSE(absl::StrContains(status.message(), "overrun"))
        << status.message();
    // Step's own refusal of the same columns, to the letter.
    const std::optional<v1::PackedOperations> parsed =
        ParseRequest(raw->request_area(), area);
    ASSERT_TRUE(parsed.has_value());
    v1::StepResponse resp;
    const absl::Status direct =
        DirectStep(*twins.served, twins.served_session, *parsed, &resp);
    EXPECT_EQ(status, direct);
    unchanged();
  }

  // Random bytes: commands, counts and columns. Counts mostly small enough
  // to fit, so the columns' contents reach Step; every kind unknown (no
  // operation runs); the refusal is Step's for the columns the contract
  // reads, or the overrun.
  std::mt19937_64 rng(20261204);
  int64_t overruns = 0, refused_by_step = 0, unknown_commands = 0;
  for (int i = 0; i < 2000; ++i) {
    SCOPED_TRACE(absl::StrCat("garbage ", i));
    char* a = raw->request_area();
    const size_t filled = sc::kHeaderBytes + rng() % (area - sc::kHeaderBytes);
    for (size_t k = 0; k < filled; ++k) a[k] = static_cast<char>(rng());
    sc::RequestHeader h;
    std::memcpy(&h, a, sizeof(h));
    if (rng() % 8 == 0) {
      while (h.command >= sc::kStep && h.command <= sc::kClose) {
        h.command = static_cast<uint32_t>(rng());
      }
    } else {
      h.command = sc::kStep;
    }
    if (rng() % 4 != 0) {
      h.args %= 200;
      h.hashes %= 200;
      h.kinds = 1 + h.kinds % 12;
      h.request_id_lengths %= 200;
      h.request_ids %= 2000;
    }
    if (h.kinds == 0) h.kinds = 1;
    std::memcpy(a, &h, sizeof(h));
    std::optional<v1::PackedOperations> parsed = ParseRequest(a, area);
    if (parsed.has_value()) {
      for (int k = 0; k < parsed->kinds_size(); ++k) {
        uint32_t kind = parsed->kinds(k);
        while (kind >= 1 && kind <= 19) kind = static_cast<uint32_t>(rng());
        parsed->set_kinds(k, kind);
      }
      if (h.command == sc::kStep) WriteRequest(*parsed, *raw);
    }
    const absl::Status status = hostile.Publish();
    ASSERT_TRUE(absl::IsInvalidArgument(status)) << status;
    if (h.command != sc::kStep) {
      ++unknown_commands;
      EXPECT_TRUE(absl::StrContains(status.message(), "unknown command"));
    } else if (!parsed.has_value()) {
      ++overruns;
      EXPECT_TRUE(absl::StrContains(status.message(), "overrun"))
          << status.message();
    } else {
      ++refused_by_step;
      v1::StepResponse resp;
      EXPECT_EQ(status, DirectStep(*twins.served, twins.served_session, *parsed,
                                   &resp));
    }
    if (i % 100 == 0) unchanged();
  }
  unchanged();
  EXPECT_GT(overruns, 200);
  EXPECT_GT(refused_by_step, 1000);
  EXPECT_GT(unknown_commands, 100);

  // The control block scribbled on: the daemon never reads what it wrote
  // itself (the layout, its heartbeat) or the client's reply words; it
  // answers any new request_seq, a jump of a thousand too.
  char* base = raw->base();
  for (size_t offset :
       {sc::control::kMagic, sc::control::kVersion, sc::control::kControlBytes,
        sc::control::kRequestOffset, sc::control::kRequestBytes,
        sc::control::kReplyOffset, sc::control::kReplyBytes,
        sc::control::kHeartbeat, sc::control::kHeartbeatMs,
        sc::control::kDaemonWaiting, sc::control::kReplySeq}) {
    std::memset(base + offset, 0xa5, 4);
  }
  {
    sc::RequestHeader h;
    h.command = 77;
    std::memcpy(raw->request_area(), &h, sizeof(h));
    const uint32_t seq = raw->word(sc::control::kRequestSeq) + 1000;
    raw->set_word(sc::control::kRequestSeq, seq);
    sc::FutexWake(sc::WordAddress(base, sc::control::kRequestSeq));
    ASSERT_EQ(raw->Wait(seq, kPatience), RawStepChannel::Answer::kReplied);
    v1::StepResponse resp;
    EXPECT_TRUE(absl::IsInvalidArgument(
        sc::DecodeReply(raw->ReadReply(kPatience), &resp)));
  }
  unchanged();

  // After all that, the channel still serves its session exactly as Step
  // serves the twin.
  EXPECT_FALSE(client.closed());
  for (int pass = 0; pass < 200; ++pass) {
    v1::StepResponse resp;
    (void)twins.Both(client, DrawPass(draw, 1 + draw.Below(kMaxOps)), &resp);
  }
  ASSERT_TRUE(twins.Agree());
  EXPECT_EQ(Counts(*twins.served), (ChannelCounts{1, 1}));
}

// A client may ftruncate the object it was handed (it can write it). The
// daemon's next touch of the lost pages raises SIGBUS, which MappingGuard
// turns into zero pages and an ended channel: the process lives, and the
// other sessions' channels do not notice.
TEST(StepChannelInProcessTest, ATruncatedObjectEndsItsChannelAndNothingElse) {
  FakeClock clock;
  std::unique_ptr<StateCache> cache = NewCache(&clock, "chan_trunc_cache");
  ASSERT_NE(cache, nullptr);
  StepChannels channels(cache.get(), Options("chan_trunc"), nullptr);
  const std::string victim = Attach(*cache), attacker = Attach(*cache);
  std::unique_ptr<StepChannelClient> client = OpenClient(channels, victim);
  ASSERT_NE(client, nullptr);
  Draw draw(5);
  v1::StepResponse resp;
  Sent sent;
  ASSERT_TRUE(ChannelStep(*client, DrawPass(draw, 4), &resp, &sent).ok());
  const std::string before = VisibleLessChannels(*cache);

  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    absl::StatusOr<v1::OpenStepChannelResponse> opened =
        Open(channels, attacker);
    ASSERT_TRUE(opened.ok()) << opened.status();
    EXPECT_EQ(Counts(*cache), (ChannelCounts{2, 2 + round}));
    // Not mapped here: this process would take the SIGBUS itself.
    const int fd = ::shm_open(opened->shm_name().c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::ftruncate(fd, 0), 0) << std::strerror(errno);
    ::close(fd);
    // The heartbeat thread touches it within a heartbeat; the channel ends
    // and is reaped.
    ASSERT_TRUE(WaitUntil([&] { return channels.open() == 1; }))
        << "the truncated channel was never noticed";
    EXPECT_TRUE(CountsBecome(*cache, {1, 2 + round})) << Counts(*cache);
    // The victim's channel serves on, and nothing changed.
    EXPECT_FALSE(client->closed());
    EXPECT_TRUE(client->Ping().ok());
    EXPECT_EQ(VisibleLessChannels(*cache), before);
    EXPECT_TRUE(cache->CheckInvariants().ok());
  }
  // The attacker's session may open a channel again and use it.
  std::unique_ptr<StepChannelClient> again = OpenClient(channels, attacker);
  ASSERT_NE(again, nullptr);
  ASSERT_TRUE(ChannelStep(*again, DrawPass(draw, 4), &resp, &sent).ok());
  EXPECT_EQ(sent, Sent::kAnswered);
  ASSERT_TRUE(ChannelStep(*client, DrawPass(draw, 4), &resp, &sent).ok());
  EXPECT_EQ(sent, Sent::kAnswered);
  EXPECT_EQ(Counts(*cache), (ChannelCounts{2, 5}));
}

}  // namespace
}  // namespace statecache
