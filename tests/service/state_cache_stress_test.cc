// The daemon's core under concurrency, as the daemon runs it: StateCache
// with real (host) state memory, its copier on worker threads, and the
// metrics exporter, driven at once by
//   * three scheduler threads, each attaching a session, running passes of
//     real operations (begin_pass, admit, reserve/publish, consume_fork,
//     checkpoint, snapshot, copy, release; list and packed forms alike)
//     over prefixes the others share, then detaching, or abandoning the
//     session for its lease to lapse;
//   * an operator resizing the pool up and down, one resize at a time,
//     each waited for through its completion callback (which runs on
//     whichever thread finishes the resize);
//   * the maintenance thread: a fake clock moved on a millisecond per
//     Tick, so leases lapse, fenced slots come back and shrinks hit their
//     deadline while the others run;
//   * two metrics scrapers (Metrics::Render, what the exporter's workers
//     serve) whose counters must never go back, while the schedulers report
//     their calls to the same Metrics as the gRPC adapter does (OnRpc);
//   * an operator reading GetStats, ListSessions and the debug dumps,
//     checking the core's invariants mid-run and now and then evicting a
//     session.
// The main build runs it for its checks; the TSan stage (the `tsan` preset)
// runs it for the races, where any report fails it. Threads start together
// and stop on a wall-clock budget once each has made some progress: no
// sleeps; waiting is on the resize callback and the other threads' ends.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <latch>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "daemon/device/host_device.h"
#include "daemon/metrics/metrics.h"
#include "daemon/service/state_cache.h"
#include "gtest/gtest.h"
#include "proto/packed_form.h"
#include "tests/service/fake_clock.h"

namespace statecache {
namespace {

constexpr int64_t kBlock = 64;
constexpr int64_t kStartSlots = 24;
constexpr int64_t kMaxSlots = 48;
// The operator's targets, in turn: shrinks below what three sessions hold
// and grows back.
constexpr int64_t kResizeTargets[] = {12, 40, 20, 48, 16, 32};
constexpr int64_t kQuota = 8;  // slots one session's requests may hold
constexpr int kWorkers = 3;
// Fake time: one Tick moves the clock this much, so a lease lapses after
// ~1000 Ticks without a call from its session.
constexpr absl::Duration kTickStep = absl::Milliseconds(1);
constexpr absl::Duration kLease = absl::Seconds(1);
constexpr absl::Duration kQuarantine = absl::Milliseconds(100);
constexpr int64_t kResizeDeadlineMs = 200;
// Wall-clock budget; each thread also runs until it made its minimum.
constexpr std::chrono::milliseconds kRunFor(2000);

v1::Identity Identity() {
  v1::Identity id;
  id.set_model_id("stress/model");
  id.set_hash_block_size(kBlock);
  return id;
}

// Host state memory whose copier shares even these small copies across
// three threads, so relocations, copies and snapshots run on its workers.
std::unique_ptr<StateCache> NewCache(Clock* clock) {
  HostDeviceOptions device_options;
  device_options.layout = *StateLayout::Create(
      "stress", {{"conv", {3, 8}, DType::kBF16}, {"ssm", {2, 4}, DType::kF32}},
      2);
  device_options.num_slots = kStartSlots;
  device_options.max_slots = kMaxSlots;
  device_options.epoch = NewEpoch(absl::Now());
  device_options.prefix = "statecache_stress_test";
  device_options.copier.num_threads = 3;
  device_options.copier.inline_bytes = 0;
  device_options.copier.min_share_bytes = 64;
  absl::StatusOr<std::unique_ptr<HostDevice>> device =
      HostDevice::Create(device_options);
  EXPECT_TRUE(device.ok()) << device.status();
  if (!device.ok()) return nullptr;
  StateCacheOptions options;
  options.identity = Identity();
  options.num_slots = kStartSlots;
  options.max_slots = kMaxSlots;
  options.transfer = *StateTransfer::Create(TransferKind::kFork, 1, true);
  options.lease_ttl = kLease;
  options.quarantine = kQuarantine;
  options.max_operations_per_step = 64;
  options.max_slots_per_session = kQuota;
  options.clock = clock;
  options.device = std::move(*device);
  absl::StatusOr<std::unique_ptr<StateCache>> cache =
      StateCache::Create(std::move(options));
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? std::move(*cache) : nullptr;
}

// Shared conversations: conversation c's block k hashes to c * 100 + k + 1,
// so requests of every session resume from one another's checkpoints.
constexpr int kConversations = 4;
int64_t BlockHash(int conversation, int64_t block) {
  return conversation * 100 + block + 1;
}

// When the foreground threads (schedulers, resizer) stop: the budget spent
// and their own minimum made.
class Budget {
 public:
  void Start() { end_ = std::chrono::steady_clock::now() + kRunFor; }
  bool Spent() const { return std::chrono::steady_clock::now() >= end_; }

 private:
  std::chrono::steady_clock::time_point end_;
};

// What one scheduler thread did (read by the test after joining it).
struct WorkerReport {
  int64_t attaches = 0, detaches = 0, abandoned = 0, lost_sessions = 0;
  int64_t steps = 0, packed_steps = 0;
  int64_t admitted = 0, kept = 0, published = 0, snapshots = 0, copies = 0;
  int64_t released = 0;
  // Anything but the refusals a busy shared pool gives: a bug.
  std::vector<std::string> unexpected;
};

// One live request of a scheduler: which prefix it extends and how far.
struct Live {
  std::string id;
  int conversation = 0;
  int64_t blocks = 0;
  int width = 1;
  int passes = 0;
  bool reserved = false;
};

class Scheduler {
 public:
  Scheduler(StateCache& cache, RpcObserver& rpcs, int index, uint64_t seed,
            WorkerReport& report)
      : cache_(cache),
        rpcs_(rpcs),
        index_(index),
        rng_(seed),
        report_(report) {}

  // Sessions of a few passes each until the budget is spent (three at
  // least); every third is abandoned for its lease to lapse.
  void Run(const Budget& budget) {
    for (int session = 0; session < 3 || !budget.Spent(); ++session) {
      if (!Attach()) continue;
      const int passes = 2 + static_cast<int>(rng_() % 6);
      bool alive = true;
      for (int p = 0; p < passes && alive; ++p) alive = Pass();
      if (!alive) continue;  // lapsed or evicted under it
      if (session % 3 == 1) {
        ++report_.abandoned;
        continue;
      }
      v1::DetachRequest req;
      req.set_session_id(session_id_);
      v1::DetachResponse resp;
      const absl::Status status =
          Timed(RpcMethod::kDetach, [&] { return cache_.Detach(req, &resp); });
      if (status.ok()) {
        ++report_.detaches;
      } else if (!absl::IsNotFound(status)) {
        report_.unexpected.push_back(status.ToString());
      }
    }
  }

 private:
  bool Attach() {
    v1::AttachRequest req;
    *req.mutable_identity() = Identity();
    req.set_client_name(absl::StrCat("scheduler-", index_));
    v1::AttachResponse resp;
    const absl::Status status =
        Timed(RpcMethod::kAttach, [&] { return cache_.Attach(req, &resp); });
    if (!status.ok()) {
      report_.unexpected.push_back(status.ToString());
      return false;
    }
    ++report_.attaches;
    session_id_ = resp.session_id();
    live_.clear();
    return true;
  }

  // One scheduler pass: the step before the forward and the one after.
  // False when the session is gone (its lease lapsed, or it was evicted).
  bool Pass() {
    // Before: the pin clock, new requests (resuming what any session
    // checkpointed), midstep reservations.
    v1::StepRequest before;
    before.add_operations()->mutable_begin_pass();
    std::vector<Live> admitting;
    for (int n = static_cast<int>(rng_() % 3); n > 0; --n) {
      Live r;
      r.id = absl::StrCat("s", index_, "-", next_request_++);
      r.conversation = static_cast<int>(rng_() % kConversations);
      r.blocks = 1 + static_cast<int64_t>(rng_() % 5);
      r.width = rng_() % 4 == 0 ? 2 : 1;
      v1::Admit* a = before.add_operations()->mutable_admit();
      a->set_request_id(r.id);
      a->set_width(r.width);
      a->set_num_tokens(r.blocks * kBlock + 8);
      a->set_anchor_pos(r.blocks * kBlock);
      for (int64_t k = 0; k < r.blocks; ++k) {
        a->add_block_hashes(BlockHash(r.conversation, k));
      }
      a->set_kv_hit_blocks(static_cast<int32_t>(r.blocks));
      admitting.push_back(std::move(r));
    }
    // (operation index, live_ index) of each reservation.
    std::vector<std::pair<int, size_t>> reserving;
    for (size_t i = 0; i < live_.size(); ++i) {
      Live& r = live_[i];
      if (rng_() % 3 != 0) continue;
      // The state one block further on, written midstep by this pass's
      // forward.
      reserving.emplace_back(before.operations_size(), i);
      v1::Reserve* res = before.add_operations()->mutable_reserve();
      res->set_request_id(r.id);
      v1::MidstepPosition* pos = res->add_positions();
      pos->set_position((r.blocks + 1) * kBlock);
      pos->set_hash(BlockHash(r.conversation, r.blocks));
    }
    std::vector<v1::OperationResult> results;
    if (!Send(before, &results)) return false;
    for (auto [op, i] : reserving) {
      const v1::OperationResult& result = results[op];
      Expect(result);
      live_[i].reserved =
          result.code() == 0 && result.reserve().reservations_size() > 0;
    }
    for (size_t k = 0; k < admitting.size(); ++k) {
      const v1::OperationResult& result = results[1 + k];
      Expect(result);
      if (result.code() == 0) {
        ++report_.admitted;
        live_.push_back(std::move(admitting[k]));
      }
    }

    // After: forks read, reservations published, checkpoints at the new
    // boundary (or a snapshot), a copy between a wide request's slots,
    // finished requests released.
    v1::StepRequest after;
    for (Live& r : live_) {
      r.passes++;
      after.add_operations()->mutable_consume_fork()->set_request_id(r.id);
      if (r.reserved) {
        after.add_operations()->mutable_publish()->set_request_id(r.id);
        r.reserved = false;
        ++r.blocks;
      }
      if (rng_() % 4 == 0) {
        v1::Snapshot* s = after.add_operations()->mutable_snapshot();
        s->set_request_id(r.id);
        s->set_position(r.blocks * kBlock);
        s->set_hash(BlockHash(r.conversation, r.blocks - 1));
      } else {
        v1::Checkpoint* c = after.add_operations()->mutable_checkpoint();
        c->set_request_id(r.id);
        c->set_boundary_blocks(r.blocks);
        c->set_hash(BlockHash(r.conversation, r.blocks - 1));
        c->set_anchor_pos(r.blocks * kBlock);
      }
      if (r.width == 2) {
        v1::Copy* c = after.add_operations()->mutable_copy();
        c->set_request_id(r.id);
        c->set_from_index(0);
        c->set_to_index(1);
      }
      if (r.passes >= 1 + static_cast<int>(rng_() % 3)) {
        after.add_operations()->mutable_release()->set_request_id(r.id);
      }
    }
    if (after.operations_size() == 0) return true;
    if (!Send(after, &results)) return false;
    for (int i = 0; i < after.operations_size(); ++i) {
      const v1::OperationResult& result = results[i];
      switch (after.operations(i).kind_case()) {
        case v1::Operation::kPublish:
          report_.published += result.publish().published();
          break;
        case v1::Operation::kCheckpoint:
          report_.kept += result.checkpoint().kept();
          Expect(result);
          break;
        case v1::Operation::kSnapshot:
          report_.snapshots += result.code() == 0;
          Expect(result);
          break;
        case v1::Operation::kCopy:
          report_.copies += result.code() == 0;
          Expect(result);
          break;
        case v1::Operation::kRelease: {
          report_.released += result.code() == 0;
          Expect(result);
          const std::string& id = after.operations(i).release().request_id();
          std::erase_if(live_, [&id](const Live& r) { return r.id == id; });
          break;
        }
        default:
          Expect(result);
          break;
      }
    }
    if (rng_() % 8 == 0) {
      v1::KeepAliveRequest req;
      req.set_session_id(session_id_);
      v1::KeepAliveResponse resp;
      if (!Timed(RpcMethod::kKeepAlive, [&] {
             return cache_.KeepAlive(req, &resp);
           }).ok()) {
        return Lost();
      }
    }
    return true;
  }

  // Sends `request` as a list or packed (in turn), its results as a list.
  bool Send(v1::StepRequest request, std::vector<v1::OperationResult>* out) {
    request.set_session_id(session_id_);
    const bool packed = report_.steps++ % 2 == 1;
    if (packed) {
      v1::StepRequest p;
      p.set_session_id(session_id_);
      if (absl::Status st =
              PackOperations(request.operations(), p.mutable_packed());
          !st.ok()) {
        report_.unexpected.push_back(st.ToString());
        return false;
      }
      request = std::move(p);
      ++report_.packed_steps;
    }
    v1::StepResponse resp;
    const absl::Status status =
        Timed(RpcMethod::kStep, [&] { return cache_.Step(request, &resp); });
    if (absl::IsNotFound(status)) return Lost();
    if (!status.ok()) {
      report_.unexpected.push_back(status.ToString());
      return Lost();
    }
    google::protobuf::RepeatedPtrField<v1::OperationResult> results;
    if (packed) {
      if (absl::Status st = UnpackResults(resp.packed_results(),
                                          request.packed().kinds(), &results);
          !st.ok()) {
        report_.unexpected.push_back(st.ToString());
        return false;
      }
    } else {
      results = resp.results();
    }
    out->assign(results.begin(), results.end());
    return true;
  }

  // Runs `call` and reports it to the metrics, as the gRPC adapter does.
  template <typename Call>
  absl::Status Timed(RpcMethod method, Call call) {
    const auto start = std::chrono::steady_clock::now();
    absl::Status status = call();
    rpcs_.OnRpc(
        method, status.code(),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
    return status;
  }

  // The session lapsed or was evicted: its requests went with it.
  bool Lost() {
    ++report_.lost_sessions;
    live_.clear();
    return false;
  }

  // Every operation here is well formed and names a live request: the one
  // refusal a busy, shared, resized pool may give is RESOURCE_EXHAUSTED (no
  // slot free, or the session's quota).
  void Expect(const v1::OperationResult& result) {
    if (result.code() == 0 ||
        result.code() ==
            static_cast<int>(absl::StatusCode::kResourceExhausted)) {
      return;
    }
    report_.unexpected.push_back(
        absl::StrCat("code ", result.code(), ": ", result.message()));
  }

  StateCache& cache_;
  RpcObserver& rpcs_;
  const int index_;
  std::mt19937_64 rng_;
  WorkerReport& report_;
  std::string session_id_;
  std::vector<Live> live_;
  int64_t next_request_ = 0;
};

// The value of the first sample of `family` in exposition text, or -1.
double Sample(absl::string_view text, absl::string_view family) {
  const std::string prefix = absl::StrCat("\n", family, " ");
  const size_t at = text.find(prefix);
  if (at == absl::string_view::npos) return -1;
  absl::string_view rest = text.substr(at + prefix.size());
  rest = rest.substr(0, rest.find('\n'));
  double value = -1;
  return absl::SimpleAtod(rest, &value) ? value : -1;
}

TEST(StateCacheStressTest, ConcurrentSessionsResizesExpiryAndScrapes) {
  FakeClock clock;
  std::unique_ptr<StateCache> cache = NewCache(&clock);
  ASSERT_NE(cache, nullptr);
  Metrics metrics(cache.get(), Metrics::Options{});
  cache->AddObserver(&metrics);  // before any call, as the daemon does

  // The resize callback may run on any thread; it counts and wakes the
  // operator.
  struct ResizeOutcomes {
    std::mutex mu;
    int64_t ok = 0, deadline = 0, other = 0;
    std::vector<std::string> unexpected;
    std::atomic<int64_t> done{0};
  };
  auto outcomes = std::make_shared<ResizeOutcomes>();

  Budget budget;
  // Foreground threads still running; the background ones (maintenance,
  // scraper, operator) go on until it is 0.
  std::atomic<int> foreground{kWorkers + 1};
  std::latch start(kWorkers + 6);  // every thread and this one
  std::vector<WorkerReport> reports(kWorkers);
  std::vector<std::thread> threads;

  for (int i = 0; i < kWorkers; ++i) {
    threads.emplace_back([&, i] {
      Scheduler scheduler(*cache, metrics, i, 1000 + i, reports[i]);
      start.arrive_and_wait();
      scheduler.Run(budget);
      foreground.fetch_sub(1);
    });
  }

  int64_t resizes = 0, grows = 0;
  threads.emplace_back([&] {
    start.arrive_and_wait();
    for (size_t k = 0; resizes < 4 || !budget.Spent(); ++k) {
      const int64_t target = kResizeTargets[k % std::size(kResizeTargets)];
      v1::GetStatsResponse stats;
      cache->GetStats(&stats);
      grows += target > stats.slots_total();
      v1::ResizeRequest req;
      req.set_target_slots(target);
      req.set_deadline_ms(kResizeDeadlineMs);
      const int64_t done_before = outcomes->done.load();
      cache->Resize(
          req, [outcomes](absl::Status status, const v1::ResizeResponse& resp) {
            {
              std::lock_guard<std::mutex> lock(outcomes->mu);
              if (status.ok()) {
                ++outcomes->ok;
              } else if (absl::IsDeadlineExceeded(status)) {
                ++outcomes->deadline;
              } else {
                ++outcomes->other;
                outcomes->unexpected.push_back(status.ToString());
              }
            }
            outcomes->done.fetch_add(1);
            outcomes->done.notify_all();
          });
      ++resizes;
      // One at a time: until this one's callback ran (from this thread, a
      // Step, a Detach or a Tick).
      for (int64_t d = outcomes->done.load(); d == done_before;
           d = outcomes->done.load()) {
        outcomes->done.wait(d);
      }
    }
    foreground.fetch_sub(1);
  });

  int64_t ticks = 0;
  int64_t expiries_seen = 0;
  threads.emplace_back([&] {
    start.arrive_and_wait();
    // Until the foreground is done and a lease lapsed here (an abandoned
    // session's lapses ~1000 Ticks after its last call).
    while (foreground.load() > 0 || expiries_seen == 0) {
      clock.Advance(kTickStep);
      cache->Tick();
      (void)cache->NextDeadline();
      if (++ticks % 64 == 0) {
        v1::GetStatsResponse stats;
        cache->GetStats(&stats);
        expiries_seen = stats.lease_expiries();
      }
    }
  });

  struct Scraper {
    int64_t scrapes = 0;
    std::vector<std::string> errors;
  };
  std::vector<Scraper> scrapers(2);
  for (Scraper& scraper : scrapers) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      double kept = 0, expiries = 0, resumes = 0;
      while (foreground.load() > 0 || scraper.scrapes < 3) {
        const std::string text = metrics.Render();
        ++scraper.scrapes;
        // Counters only grow, whatever ran between two scrapes (the other
        // scraper's included).
        const double k = Sample(text, "statecache_checkpoints_kept_total");
        const double e = Sample(text, "statecache_lease_expiries_total");
        const double r =
            Sample(text, "statecache_resumes_total{outcome=\"fork\"}");
        if (k < kept || e < expiries || r < resumes) {
          scraper.errors.push_back(absl::StrCat(
              "counter went back: kept ", kept, "->", k, " expiries ", expiries,
              "->", e, " forks ", resumes, "->", r));
        }
        kept = k;
        expiries = e;
        resumes = r;
      }
    });
  }

  int64_t reads = 0, evictions = 0;
  std::vector<std::string> read_errors;
  threads.emplace_back([&] {
    start.arrive_and_wait();
    while (foreground.load() > 0 || reads < 3) {
      ++reads;
      v1::GetStatsResponse stats;
      cache->GetStats(&stats);
      if (stats.slots_used() + stats.slots_held() + stats.slots_vacant() !=
          stats.slots_total()) {
        read_errors.push_back(stats.ShortDebugString());
      }
      v1::ListSessionsResponse sessions;
      if (absl::Status st =
              cache->ListSessions(v1::ListSessionsRequest(), &sessions);
          !st.ok()) {
        read_errors.push_back(st.ToString());
      }
      for (const v1::SessionInfo& s : sessions.sessions()) {
        if (s.slots() > kQuota) read_errors.push_back(s.ShortDebugString());
      }
      if (absl::Status st = cache->CheckInvariants(); !st.ok()) {
        read_errors.push_back(st.ToString());
      }
      if (reads % 16 == 0) {
        (void)cache->DumpPool();
        (void)cache->DebugDump();
      }
      if (reads % 64 == 0 && sessions.sessions_size() > 0) {
        v1::EvictSessionRequest req;
        req.set_handle(sessions.sessions(0).handle());
        v1::EvictSessionResponse resp;
        // NOT_FOUND: it ended since the listing.
        evictions += cache->EvictSession(req, &resp).ok();
      }
    }
  });

  budget.Start();
  start.arrive_and_wait();
  // (The main thread is one of the latch's; it only waits from here.)
  for (std::thread& t : threads) t.join();

  // Every thread made progress, and nothing it saw was wrong.
  for (int i = 0; i < kWorkers; ++i) {
    SCOPED_TRACE(absl::StrCat("scheduler ", i));
    const WorkerReport& r = reports[i];
    EXPECT_GE(r.attaches, 3);
    EXPECT_GT(r.detaches, 0);
    EXPECT_GT(r.steps, 0);
    EXPECT_GT(r.packed_steps, 0);
    EXPECT_GT(r.admitted, 0);
    EXPECT_GT(r.released, 0);
    EXPECT_TRUE(r.unexpected.empty()) << r.unexpected.front();
    for (auto [name, value] : {std::pair{"steps", r.steps},
                               {"sessions", r.attaches},
                               {"lost_sessions", r.lost_sessions},
                               {"admitted", r.admitted},
                               {"kept", r.kept},
                               {"published", r.published},
                               {"snapshots", r.snapshots},
                               {"copies", r.copies}}) {
      RecordProperty(absl::StrCat(name, "_", i), static_cast<int>(value));
    }
  }
  EXPECT_GE(resizes, 4);
  EXPECT_GT(grows, 0);
  {
    std::lock_guard<std::mutex> lock(outcomes->mu);
    EXPECT_EQ(outcomes->done.load(), resizes);  // each callback ran once
    EXPECT_GT(outcomes->ok + outcomes->deadline, 0);
    EXPECT_TRUE(outcomes->unexpected.empty()) << outcomes->unexpected.front();
    RecordProperty("resizes_ok", static_cast<int>(outcomes->ok));
    RecordProperty("resizes_deadline", static_cast<int>(outcomes->deadline));
  }
  EXPECT_GT(ticks, 0);
  EXPECT_GT(expiries_seen, 0);
  for (const Scraper& scraper : scrapers) {
    EXPECT_GE(scraper.scrapes, 3);
    EXPECT_TRUE(scraper.errors.empty()) << scraper.errors.front();
  }
  EXPECT_GE(reads, 3);
  EXPECT_TRUE(read_errors.empty()) << read_errors.front();
  RecordProperty("resizes", static_cast<int>(resizes));
  RecordProperty("ticks", static_cast<int>(ticks));
  RecordProperty("scrapes",
                 static_cast<int>(scrapers[0].scrapes + scrapers[1].scrapes));
  RecordProperty("evictions", static_cast<int>(evictions));

  // Quiet now: the abandoned sessions lapse, the fences lift, and every
  // slot is accounted for.
  ASSERT_TRUE(cache->CheckInvariants().ok()) << cache->CheckInvariants();
  clock.Advance(kLease + absl::Milliseconds(1));
  cache->Tick();  // the abandoned sessions lapse: their slots fenced
  clock.Advance(kQuarantine);
  cache->Tick();  // and released
  ASSERT_TRUE(cache->CheckInvariants().ok()) << cache->CheckInvariants();
  v1::GetStatsResponse end;
  cache->GetStats(&end);
  EXPECT_EQ(end.sessions(), 0) << end.ShortDebugString();
  EXPECT_EQ(end.requests(), 0) << end.ShortDebugString();
  EXPECT_EQ(end.slots_used(), 0) << end.ShortDebugString();
  EXPECT_EQ(end.slots_used() + end.slots_held() + end.slots_vacant(),
            end.slots_total());
  EXPECT_GT(end.checkpoints_kept(), 0) << end.ShortDebugString();
  EXPECT_GT(end.resumes_fork() + end.resumes_adopt(), 0)
      << end.ShortDebugString();
  EXPECT_GT(end.lease_expiries(), 0);
  RecordProperty("lease_expiries", static_cast<int>(end.lease_expiries()));
  RecordProperty("resumes_fork", static_cast<int>(end.resumes_fork()));
  // The exporter's last word agrees with the core's.
  const std::string text = metrics.Render();
  EXPECT_EQ(Sample(text, "statecache_sessions"), 0);
  EXPECT_EQ(Sample(text, "statecache_checkpoints_kept_total"),
            static_cast<double>(end.checkpoints_kept()));
  EXPECT_EQ(Sample(text, "statecache_lease_expiries_total"),
            static_cast<double>(end.lease_expiries()));
  EXPECT_EQ(Sample(text, "statecache_slots_capacity"),
            static_cast<double>(end.slots_total()));
  int64_t steps = 0;
  for (const WorkerReport& r : reports) steps += r.steps;
  EXPECT_EQ(
      Sample(text, "statecache_rpc_duration_seconds_count{method=\"Step\"}"),
      static_cast<double>(steps));
}

}  // namespace
}  // namespace statecache
