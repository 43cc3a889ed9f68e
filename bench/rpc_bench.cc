// rpc_bench: what a pass costs over the wire, against an empty call.
//
//   rpc_bench [--statecached=PATH] [--iterations=N] [--reps=N]
//   rpc_bench --wire_breakdown   (in-process: each stage of a pass, timed,
//                                 list and packed)
//   rpc_bench --client_cpus=0 --server_cpus=1   (pinned; the first line of
//                                 the output says where each side ran)
//   rpc_bench --rows "packed, 256" --paired=false --calibrate=false
//             --throughput=false   (the reference table and its rows only)
//
// Starts its own statecached on a Unix socket in a temporary directory and
// measures, on that socket in the same run:
//   * round-trip latency (p50, p99) of Ping (the baseline: an empty call),
//     of a one-operation Step, and of Steps of 64 and 256 realistic
//     operations (a scheduler pass: begin_pass, admissions that resume from
//     earlier turns, checkpoints, releases), unary and over StepStream, each
//     printed as a ratio to Ping's; the same passes in the packed form
//     (`packed` rows: PackedOperations, the list written as columns by the
//     codec, proto/packed_codec.h) and through the C++ client library
//     (which sends the packed form); and, to take the 256-op Step apart, a
//     Ping carrying as many bytes (one field it does not know) and the
//     256-op request refused whole (unknown session): what moving its bytes
//     costs, and what carrying it costs with no operation run;
//   * steps/s with 1, 4 and 16 concurrent sessions (one thread each, 64-op
//     steps over StepStream).
// Every figure is the median over --reps runs, each run going through every
// row in turn; a ratio is the median of the runs' ratios to their own Ping.
//
// The reference table (--reference, on by default) says what moving the
// pool out of process costs a scheduler against the in-process pool it has
// today. Before anything is timed, the pool calls the in-process row's
// 256-op passes make (50 untimed passes, then --reference_passes timed ones,
// at most --iterations) are recorded as a pool trace (shared/reference/
// TRACE_FORMAT.md) by PoolCallRecorder, which mirrors StateCache's mapping
// of each operation onto SlotPool calls (the mapping is documented there);
// the run stops if the recorded calls leave the pool otherwise than a
// StateCache's Step of the same passes does, and prints a WARNING if the
// reference's run_trace.py gives any result other than SlotPool's (the
// table's heading says they were identical). Then, in every run, among the
// other rows:
//   * `reference pool (Python)`: those calls on the reference pool in a
//     Python process (--python; bench/reference_timing.py --paced --passes),
//     arguments converted before the clock, each pass timed as one;
//   * `SlotPool (C++)`: the same calls on this project's pool alone
//     (replay::Invoke, as statecache-replay runs a trace);
//   * `in-process, packed, 256 ops`: the same passes through
//     StateCache::Step (the core pass, metrics on, at the daemon's default
//     --operation_timing_interval);
// and the table prints them with the `Step, 256 ops, packed` (unary) and
// `StepStream, 256 ops, packed` round trips, p50 and p99 of one pass and the
// p50's ratio to the reference's (the median of the runs' ratios). These
// rows run whatever --rows selects. With no run_trace.py in
// --reference_dir (a clone has no ../shared beside it) or --reference=false,
// one line says `reference rows not run: ` and why, and the rest runs as
// before. --pool_trace=PATH keeps the trace (PATH.passes.json: where the
// timed passes start and end); it replays on statecache-replay and
// run_trace.py with identical results.
//
// A second table (--paired) times each Step row against a Ping made under
// the same conditions: interleaved with it in blocks, and with the client
// building a pass of the row's size before every Ping as it does before
// every Step. In the first table Ping runs back to back with nothing between
// calls, which on a VM whose vCPUs halt when idle is the cheapest a call
// ever gets (rows `Ping, 30 us after` and `Ping, 1 ms after` show how much
// more a spaced call costs), while every Step row's client builds its next
// pass between calls; and its ratios drift between runs with the VM's. Row
// `packed, 1 ms apart` spaces its calls (and its paired Pings) as a scheduler's
// passes are spaced by the forward between them, so that each call finds the
// daemon idle.
//
// A third table (--calibrate) says what handler time itself costs here:
// Pings to a bare callback server whose handler busy-waits 5, 10, 20 us and
// as long as the 256-op packed core takes, each paired with a do-nothing
// Ping. On a VM each microsecond of handler time can cost several of round
// trip (waking the other, halted vCPU), and about one when the benchmark
// runs on one vCPU (`taskset -c 0 rpc_bench`); bench/results/ has the
// figures.
#include <fcntl.h>
#include <google/protobuf/arena.h>
#include <grpcpp/grpcpp.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/paced_reference.h"
#include "client/statecache_client.h"
#include "daemon/core/slot_pool.h"
#include "daemon/metrics/metrics.h"
#include "daemon/replay/trace.h"
#include "daemon/service/state_cache.h"
#include "proto/message_arena.h"
#include "proto/packed_form.h"
#include "proto/statecache/v1/statecache.grpc.pb.h"

ABSL_FLAG(std::string, statecached, STATECACHED_PATH_DEFAULT,
          "the daemon binary to start");
ABSL_FLAG(int, iterations, 3000, "round trips per latency measurement");
ABSL_FLAG(int, reps, 5, "repetitions (median reported)");
ABSL_FLAG(double, seconds, 2.0, "duration of each throughput run");
ABSL_FLAG(std::string, rows, "",
          "only the latency rows whose name contains this (Ping always runs: "
          "it is the baseline; with --in_process_only, only those in-process "
          "rows); empty: all");
ABSL_FLAG(bool, paired, true,
          "also time each Step row paired with Ping (see MeasurePaired)");
ABSL_FLAG(bool, throughput, true, "also measure steps/s by session count");
ABSL_FLAG(bool, wire_breakdown, false,
          "time a pass's serialisation and parsing on each side and the "
          "core's Step, stage by stage, in-process");
ABSL_FLAG(int, evict_kb, 0,
          "with --wire_breakdown: write this many KiB of other memory between "
          "passes, so each stage starts with the caches a real pass finds "
          "(the rest of the process ran meanwhile); 0: warm");
ABSL_FLAG(bool, calibrate, true,
          "also time Pings to a bare callback server whose handler "
          "busy-waits as long as the 256-op core takes (see BusyPingServer)");
ABSL_FLAG(std::string, busy_server, "",
          "internal: serve BusyPingService on this address and exit");
ABSL_FLAG(int, busy_server_ready_fd, -1,
          "internal: with --busy_server, write \"ready\" to this fd");
ABSL_FLAG(int32_t, operation_timing_interval,
          statecache::StateCacheOptions{}.operation_timing_interval,
          "in-process rows: time one operation in about this many for the "
          "metrics, as statecached's flag of that name (1: every one)");
ABSL_FLAG(bool, in_process_only, false,
          "time only StateCache::Step in-process (for profiling the core)");
ABSL_FLAG(std::string, client_cpus, "",
          "run the benchmark's client on these CPUs (\"0\", \"0,2\", \"0-3\"); "
          "empty: wherever the scheduler puts it");
ABSL_FLAG(bool, reference, true,
          "also run the reference table: the 256-op pass's pool calls on the "
          "reference pool (Python, in-process) and on SlotPool, and the "
          "256-op packed rows as ratios to the reference (its rows run "
          "whatever --rows says)");
ABSL_FLAG(std::string, reference_dir, STATECACHE_REFERENCE_DIR_DEFAULT,
          "directory of the reference's run_trace.py");
ABSL_FLAG(std::string, source_dir, STATECACHE_SOURCE_DIR_DEFAULT,
          "the repository (for bench/reference_timing.py)");
ABSL_FLAG(std::string, python, "/usr/bin/python3",
          "the Python that runs the reference");
ABSL_FLAG(int, reference_passes, 300,
          "timed passes per run of the reference table's pool rows (at most "
          "--iterations), after 50 untimed ones");
ABSL_FLAG(std::string, pool_trace, "",
          "keep the recorded trace here (and where its passes start in "
          "PATH.passes.json); empty: a temporary file, removed");
ABSL_FLAG(std::string, server_cpus, "",
          "run statecached (and the calibration server) on these CPUs; "
          "empty: as the client");

namespace statecache {
namespace {

using Clock = std::chrono::steady_clock;
namespace v1 = ::statecache::v1;

constexpr int64_t kBlock = 64;
constexpr int kSlots = 4096;

// ------------------------------------------------------------------ platform

// A CPU list as taskset takes it ("0", "0,2", "0-3"), or nullopt when it is
// not one.
std::optional<cpu_set_t> ParseCpuList(const std::string& list) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    std::pair<std::string, std::string> range =
        absl::StrSplit(part, absl::MaxSplits('-', 1));
    int first = 0;
    int last = 0;
    if (!absl::SimpleAtoi(range.first, &first)) return std::nullopt;
    if (range.second.empty()) {
      last = first;
    } else if (!absl::SimpleAtoi(range.second, &last)) {
      return std::nullopt;
    }
    if (first < 0 || last < first || last >= CPU_SETSIZE) return std::nullopt;
    for (int cpu = first; cpu <= last; ++cpu) CPU_SET(cpu, &set);
  }
  return set;
}

// Pins the calling thread (and the threads and processes it starts later)
// to the CPUs of `flag_value`, if any; exits on a bad list or a refusal.
void PinTo(const std::string& flag_value, const char* flag_name) {
  if (flag_value.empty()) return;
  std::optional<cpu_set_t> set = ParseCpuList(flag_value);
  if (!set.has_value()) {
    std::fprintf(stderr, "rpc_bench: --%s=%s is not a CPU list\n", flag_name,
                 flag_value.c_str());
    std::exit(2);
  }
  if (sched_setaffinity(0, sizeof(*set), &*set) != 0) {
    std::fprintf(stderr, "rpc_bench: --%s=%s: sched_setaffinity: %s\n",
                 flag_name, flag_value.c_str(), std::strerror(errno));
    std::exit(2);
  }
}

// The CPUs the calling thread may run on, as a list ("0,1").
std::string AllowedCpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return "?";
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return absl::StrJoin(cpus, ",");
}

// What the ratios depend on besides the code, printed above the tables so
// that a result file says where it was measured: the CPUs online, where the
// client and servers run, and the guest's halt polling (0 on the
// development VM: an idle vCPU halts at once, and waking it is the
// multiplier the calibration table measures).
void PrintPlatform() {
  std::string halt_poll = "n/a";
  if (FILE* f = std::fopen("/sys/module/haltpoll/parameters/guest_halt_poll_ns",
                           "r")) {
    char buf[32] = {};
    if (std::fgets(buf, sizeof buf, f) != nullptr) {
      halt_poll = std::string(absl::StripAsciiWhitespace(buf));
    }
    std::fclose(f);
  }
  const std::string servers = absl::GetFlag(FLAGS_server_cpus);
  std::printf(
      "platform: %ld CPUs online; client on CPUs %s, servers on %s; guest "
      "halt polling %s ns\n",
      sysconf(_SC_NPROCESSORS_ONLN), AllowedCpus().c_str(),
      servers.empty() ? "the same" : servers.c_str(), halt_poll.c_str());
}

// ------------------------------------------------------------------ daemon

// A server process of this benchmark's on a Unix socket in a temporary
// directory of its own: `exec` is given the socket's address and the fd to
// write "ready" to (and closed) once serving, and execs the server in the
// child. The constructor returns once the server is ready; the destructor
// stops it (SIGTERM) and removes the directory.
class ServerProcess {
 public:
  explicit ServerProcess(const std::function<void(const std::string& address,
                                                  int ready_fd)>& exec) {
    char tmpl[] = "/tmp/rpc_bench.XXXXXX";
    dir_ = mkdtemp(tmpl);
    address_ = absl::StrCat("unix:", dir_, "/sc.sock");
    int fds[2];
    if (pipe(fds) != 0) std::abort();
    pid_ = fork();
    if (pid_ == 0) {
      close(fds[0]);
      PinTo(absl::GetFlag(FLAGS_server_cpus), "server_cpus");
      exec(address_, fds[1]);
      _exit(127);
    }
    close(fds[1]);
    char buf[16];
    if (read(fds[0], buf, sizeof buf) <= 0) {
      std::fprintf(stderr, "rpc_bench: a server did not become ready\n");
      std::exit(1);
    }
    close(fds[0]);
  }
  ~ServerProcess() {
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    std::string cmd = absl::StrCat("rm -rf ", dir_);
    (void)std::system(cmd.c_str());
  }
  const std::string& address() const { return address_; }

 private:
  std::string dir_;
  std::string address_;
  pid_t pid_ = -1;
};

// statecached, as deployed but for the pool's size.
class Daemon : public ServerProcess {
 public:
  Daemon()
      : ServerProcess([](const std::string& address, int ready_fd) {
          const std::string bin = absl::GetFlag(FLAGS_statecached);
          const std::string listen = absl::StrCat("--listen=", address);
          const std::string ready = absl::StrCat("--ready_fd=", ready_fd);
          const std::string slots = absl::StrCat("--num_slots=", kSlots);
          execl(bin.c_str(), bin.c_str(), listen.c_str(), ready.c_str(),
                slots.c_str(), "--model_id=bench", "--lease_ttl=60s",
                // Metrics on, as deployed (the per-operation latency
                // histograms are work every Step pays), on a port of its own.
                "--metrics_address=127.0.0.1:0", static_cast<char*>(nullptr));
        }) {}
};

// ------------------------------------------------------- handler calibration

// The field of PingRequest (unknown to it) that asks BusyPingServer's
// handler to busy-wait that many nanoseconds.
constexpr int kBusyNanosField = 1000;

// A bare gRPC callback server (the daemon's API and gRPC build, nothing of
// the daemon's) whose Ping handler busy-waits as long as the request asks:
// what a handler that works that long costs in round trip on this machine,
// beside one that does nothing. The process is this benchmark run again
// with --busy_server.
class BusyPingService final : public v1::StateCache::CallbackService {
 public:
  grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext* context,
                                 const v1::PingRequest* request,
                                 v1::PingResponse*) override {
    int64_t nanos = 0;
    const google::protobuf::UnknownFieldSet& fields =
        request->GetReflection()->GetUnknownFields(*request);
    for (int i = 0; i < fields.field_count(); ++i) {
      if (fields.field(i).number() == kBusyNanosField &&
          fields.field(i).type() ==
              google::protobuf::UnknownField::TYPE_VARINT) {
        nanos = static_cast<int64_t>(fields.field(i).varint());
      }
    }
    const auto until = Clock::now() + std::chrono::nanoseconds(nanos);
    while (Clock::now() < until) {
    }
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

int RunBusyPingServer(const std::string& address, int ready_fd) {
  BusyPingService service;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) return 1;
  if (write(ready_fd, "ready\n", 6) != 6) return 1;
  close(ready_fd);
  server->Wait();  // until the parent's SIGTERM
  return 0;
}

class BusyPingServer : public ServerProcess {
 public:
  BusyPingServer()
      : ServerProcess([](const std::string& address, int ready_fd) {
          const std::string listen = absl::StrCat("--busy_server=", address);
          const std::string ready =
              absl::StrCat("--busy_server_ready_fd=", ready_fd);
          execl("/proc/self/exe", "rpc_bench", listen.c_str(), ready.c_str(),
                static_cast<char*>(nullptr));
        }) {}
};

// ------------------------------------------------------------------ passes

// A scheduler of its own session. A pass of `ops` operations looks like a
// real one: begin_pass; a few admissions (each a new turn of a conversation,
// resuming the earlier turns' prefix); for every running request, the fork
// its last forward consumed and a checkpoint at the block boundary it has
// just decoded past; and as many releases as admissions, so the running batch
// (about ops/2 requests) and the pool stay in a steady state.
class Scheduler {
 public:
  const std::string& session() const { return session_; }
  Scheduler(std::string session, int ops, uint64_t seed)
      : session_(std::move(session)), ops_(ops), rng_(seed) {
    admits_ = std::max(1, ops_ / 32);
    batch_ = std::max(0, (ops_ - 1 - 2 * admits_) / 2);
  }

  // The next pass, as a list of operations or (`packed`) in columns, as a
  // scheduler using that form builds it.
  v1::StepRequest NextPass(bool packed = false) {
    v1::StepRequest req;
    req.set_session_id(session_);
    ListPassWriter out{&req};
    BuildPass(out);
    if (packed) {  // the same pass in columns, by the codec
      if (!PackOperations(req.operations(), req.mutable_packed()).ok()) {
        std::abort();
      }
      req.clear_operations();
    }
    return req;
  }
  // The next pass through the C++ client library's StepBuilder.
  StepBuilder NextBuilder() {
    StepBuilder b;
    BuildPass(b);
    return b;
  }
  // The next pass written through `out` (see BuildPass): PoolCallRecorder.
  template <typename Out>
  void NextPassInto(Out& out) {
    BuildPass(out);
  }

 private:
  // The pass's operations, written through `out`: anything with the
  // StepBuilder's methods for the kinds used here and size().
  template <typename Out>
  void BuildPass(Out& out) {
    out.BeginPass();
    if (ops_ == 1) return;
    auto size = [&] { return static_cast<int>(out.size()); };
    // Releases of the oldest running requests, once the batch is full.
    const int to_release = std::min<int>(
        admits_,
        std::max<int>(0, static_cast<int>(running_.size()) + admits_ - batch_));
    for (int i = 0; i < to_release; ++i) {
      out.Release(running_.front().id);
      running_.erase(running_.begin());
    }
    // Forks consumed and checkpoints for the running batch.
    for (Running& r : running_) {
      if (size() + 2 > ops_ - admits_) break;
      out.ConsumeFork(r.id);
      Conversation& conv = convs_[r.conv];
      conv.hashes.push_back(static_cast<int64_t>(
          (static_cast<uint64_t>(conv.hashes.back()) * 1000003 + 17) >> 1));
      out.Checkpoint(r.id, static_cast<int64_t>(conv.hashes.size()),
                     conv.hashes.back());
    }
    // Admissions: a new turn extends a conversation's prompt. admits_ per
    // pass in the steady state; more while the batch is filling up.
    const int want =
        std::max<int>(admits_, batch_ - static_cast<int>(running_.size()));
    for (int k = 0; k < want && size() < ops_; ++k) {
      const size_t ci = rng_() % convs_.size();
      Conversation& conv = convs_[ci];
      if (conv.hashes.empty())
        conv.hashes.push_back(static_cast<int64_t>(rng_() >> 1));
      if (conv.hashes.size() > 32)
        conv.hashes.erase(conv.hashes.begin() + 1, conv.hashes.end() - 8);
      const int kv_hit = static_cast<int>(conv.hashes.size());
      conv.hashes.push_back(static_cast<int64_t>(rng_() >> 1));
      const std::string id = absl::StrCat("r", next_id_++);
      out.Admit(id, 1, static_cast<int64_t>(conv.hashes.size()) * kBlock + 7,
                static_cast<int64_t>(conv.hashes.size()) * kBlock, conv.hashes,
                kv_hit);
      running_.push_back(Running{id, ci});
    }
    // Whatever room is left: the queries a scheduler makes while it decides
    // what to admit next.
    while (size() < ops_) {
      const Conversation& conv = convs_[rng_() % convs_.size()];
      out.ResumableHit(static_cast<int64_t>(conv.hashes.size()) * kBlock + 7,
                       conv.hashes, static_cast<int32_t>(conv.hashes.size()));
    }
  }

  // BuildPass's output as the list form.
  struct ListPassWriter {
    v1::StepRequest* req;
    size_t size() const { return static_cast<size_t>(req->operations_size()); }
    void BeginPass() { req->add_operations()->mutable_begin_pass(); }
    void Release(const std::string& id) {
      req->add_operations()->mutable_release()->set_request_id(id);
    }
    void ConsumeFork(const std::string& id) {
      req->add_operations()->mutable_consume_fork()->set_request_id(id);
    }
    void Checkpoint(const std::string& id, int64_t blocks, int64_t hash) {
      v1::Checkpoint* c = req->add_operations()->mutable_checkpoint();
      c->set_request_id(id);
      c->set_boundary_blocks(blocks);
      c->set_hash(hash);
    }
    void Admit(const std::string& id, int32_t width, int64_t num_tokens,
               int64_t anchor_pos, const std::vector<int64_t>& hashes,
               int32_t kv_hit) {
      v1::Admit* a = req->add_operations()->mutable_admit();
      a->set_request_id(id);
      a->set_width(width);
      a->set_num_tokens(num_tokens);
      a->set_anchor_pos(anchor_pos);
      a->mutable_block_hashes()->Add(hashes.begin(), hashes.end());
      a->set_kv_hit_blocks(kv_hit);
    }
    void ResumableHit(int64_t num_tokens, const std::vector<int64_t>& hashes,
                      int32_t kv_hit) {
      v1::ResumableHit* q = req->add_operations()->mutable_resumable_hit();
      q->set_num_tokens(num_tokens);
      q->mutable_block_hashes()->Add(hashes.begin(), hashes.end());
      q->set_kv_hit_blocks(kv_hit);
    }
  };

  struct Conversation {
    std::vector<int64_t> hashes;
  };
  struct Running {
    std::string id;
    size_t conv;
  };
  std::string session_;
  int ops_;
  int admits_ = 1;
  int batch_ = 0;
  std::mt19937_64 rng_;
  std::vector<Conversation> convs_ = std::vector<Conversation>(256);
  std::vector<Running> running_;
  uint64_t next_id_ = 0;
};

// Ends a measurement's session so its requests do not fill the pool for the
// next one.
void Detach(v1::StateCache::Stub& stub, const std::string& session) {
  v1::DetachRequest req;
  req.set_session_id(session);
  v1::DetachResponse resp;
  grpc::ClientContext ctx;
  (void)stub.Detach(&ctx, req, &resp);
}

std::string Attach(v1::StateCache::Stub& stub) {
  v1::AttachRequest req;
  req.mutable_identity()->set_model_id("bench");
  req.mutable_identity()->set_hash_block_size(kBlock);
  v1::AttachResponse resp;
  grpc::ClientContext ctx;
  grpc::Status s = stub.Attach(&ctx, req, &resp);
  if (!s.ok()) {
    std::fprintf(stderr, "attach: %s\n", s.error_message().c_str());
    std::exit(1);
  }
  return resp.session_id();
}

// Microseconds from t0 to now.
double MicrosSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

struct Latency {
  double p50_us = 0;
  double p99_us = 0;
};

Latency Summarise(std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 99 / 100]};
}

// Refusals a steady-state pass should never see; counted, reported at the
// end (a benchmark of refused work would flatter the daemon).
std::atomic<int64_t> g_refused{0};
std::string g_first_refusal;

void CheckStep(const v1::StepResponse& resp) {
  auto check = [](uint32_t code, const std::string& message) {
    if (code != 0 && code != 8 /*RESOURCE_EXHAUSTED*/) {
      if (g_refused.fetch_add(1) == 0) {
        g_first_refusal = absl::StrCat(code, " ", message);
      }
    }
  };
  for (const auto& r : resp.results()) check(r.code(), r.message());
  const v1::PackedResults& packed = resp.packed_results();
  int refusal = 0;
  for (uint32_t code : packed.codes()) {
    if (code != 0) check(code, packed.messages(refusal++));
  }
}

// One kind of round trip, measured call by call. Prepare() is what the
// client does before the call (build the pass), off the clock; Call() is
// the timed call. Construction sets up (attach, fill the running batch) and
// destruction tears down, both untimed.
class RoundTrip {
 public:
  virtual ~RoundTrip() = default;
  virtual void Prepare() {}
  virtual void Call() = 0;
};

// One call of `trip`, after its Prepare and, with a `gap`, after waiting
// until `gap` has passed since `returned` (spinning, as a scheduler's thread
// does while its forward runs): what a call costs once the daemon's side
// has gone idle, as it has between a scheduler's passes. Sets `returned`;
// returns the call's microseconds.
double TimedCall(RoundTrip& trip, std::chrono::microseconds gap,
                 Clock::time_point& returned) {
  trip.Prepare();
  while (Clock::now() - returned < gap) {
  }
  const auto t0 = Clock::now();
  trip.Call();
  returned = Clock::now();
  return std::chrono::duration<double, std::micro>(returned - t0).count();
}

// n calls, one after another (see TimedCall for `gap`).
Latency Measure(RoundTrip& trip, int n, std::chrono::microseconds gap = {}) {
  std::vector<double> us;
  us.reserve(n);
  Clock::time_point returned;
  for (int i = 0; i < n; ++i) us.push_back(TimedCall(trip, gap, returned));
  return Summarise(us);
}

// n calls of `trip` interleaved with n of `ping` in blocks of 8 of each,
// so that both are timed at the same moments of the machine and their
// ratio does not move with the VM's drift (its speed changes by a third
// within minutes). A block's first call follows the other kind's last, so
// it is made but not counted: each counted call follows one of its own
// kind, as in a loop of its own. `gap` is TimedCall's, for every call.
// Returns {trip, ping}.
std::pair<Latency, Latency> MeasurePaired(RoundTrip& trip, RoundTrip& ping,
                                          int n,
                                          std::chrono::microseconds gap = {}) {
  constexpr int kCallsPerBlock = 8;
  std::vector<double> us[2];
  RoundTrip* trips[2] = {&trip, &ping};
  for (int k = 0; k < 2; ++k) us[k].reserve(n);
  Clock::time_point returned;
  for (int done = 0; done < n; done += kCallsPerBlock - 1) {
    for (int k = 0; k < 2; ++k) {
      for (int i = 0; i < kCallsPerBlock; ++i) {
        const double t = TimedCall(*trips[k], gap, returned);
        if (i > 0) us[k].push_back(t);
      }
    }
  }
  return {Summarise(us[0]), Summarise(us[1])};
}

// How a row's client builds its passes: StepRequests in either form, or
// the client library's StepBuilder.
enum class PassForm { kList, kPacked, kBuilder };

// Ping. With `pass_ops` > 0, Prepare builds (and drops) a pass of that many
// operations in `form`, as the Step row it is paired with does before each
// call, so that the Ping comes after the same client work. With
// `busy_nanos` > 0 (a BusyPingServer's stub only), the handler busy-waits
// that long.
class PingTrip final : public RoundTrip {
 public:
  explicit PingTrip(v1::StateCache::Stub& stub, int pass_ops = 0,
                    PassForm form = PassForm::kList, int64_t busy_nanos = 0)
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
  void Prepare() override {
    if (shadow_ == nullptr) return;
    if (form_ == PassForm::kBuilder) {
      dropped_builder_ = shadow_->NextBuilder();
    } else {
      dropped_ = shadow_->NextPass(form_ == PassForm::kPacked);
    }
  }
  void Call() override {
    grpc::ClientContext ctx;
    v1::PingResponse resp;
    if (!stub_.Ping(&ctx, req_, &resp).ok()) std::exit(1);
  }

 private:
  v1::StateCache::Stub& stub_;
  const PassForm form_;
  v1::PingRequest req_;
  std::unique_ptr<Scheduler> shadow_;
  v1::StepRequest dropped_;
  StepBuilder dropped_builder_;
};

// Fills the scheduler's running batch with 50 unary passes, untimed.
void FillBatch(v1::StateCache::Stub& stub, Scheduler& sched) {
  for (int i = 0; i < 50; ++i) {
    grpc::ClientContext ctx;
    v1::StepResponse resp;
    (void)stub.Step(&ctx, sched.NextPass(), &resp);
  }
}

// Unary Steps of `ops` operations. With `refused`, the same passes each
// refused whole for an unknown session id: the daemon parses the request,
// finds no session and answers NOT_FOUND, so no operation runs. That is what
// carrying a pass's request costs by itself (the client's serialisation, the
// socket, gRPC, the daemon's parsing), plus gRPC's error path (a refused
// refused one-op Step costs more than a served one), to set against the
// full Step.
class UnaryStepTrip final : public RoundTrip {
 public:
  UnaryStepTrip(v1::StateCache::Stub& stub, int ops, bool refused = false,
                bool packed = false)
      : stub_(stub),
        refused_(refused),
        packed_(packed),
        sched_(Attach(stub), ops, 7) {
    FillBatch(stub_, sched_);
  }
  ~UnaryStepTrip() override { Detach(stub_, sched_.session()); }
  void Prepare() override {
    req_ = sched_.NextPass(packed_);
    if (refused_) req_.set_session_id("no-such-session");
    resp_.Clear();
  }
  void Call() override {
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

 private:
  v1::StateCache::Stub& stub_;
  const bool refused_;
  const bool packed_;
  Scheduler sched_;
  v1::StepRequest req_;
  // Reused, as a scheduler would: parsing into it reuses its sub-messages.
  v1::StepResponse resp_;
};

// Ping carrying as many bytes as the same passes' requests, as one field it
// does not know (a 10 KB blob the daemon keeps unparsed): what moving the
// request's bytes through the socket and gRPC costs, without its operations
// to serialise and parse. (Carrying the pass's own bytes instead, as 257
// unknown fields, would time protobuf's unknown-field handling as well.)
class PingWithPassBytesTrip final : public RoundTrip {
 public:
  PingWithPassBytesTrip(v1::StateCache::Stub& stub, int ops)
      : stub_(stub), sched_("unused", ops, 7) {
    for (int i = 0; i < 50; ++i) (void)sched_.NextPass();  // a full batch
  }
  void Prepare() override {
    req_.Clear();
    req_.GetReflection()->MutableUnknownFields(&req_)->AddLengthDelimited(
        1000, std::string(sched_.NextPass().ByteSizeLong(), 'x'));
  }
  void Call() override {
    grpc::ClientContext ctx;
    grpc::Status s = stub_.Ping(&ctx, req_, &resp_);
    if (!s.ok()) {
      std::fprintf(stderr, "ping with bytes: %s\n", s.error_message().c_str());
      std::exit(1);
    }
  }

 private:
  v1::StateCache::Stub& stub_;
  Scheduler sched_;
  v1::PingRequest req_;
  v1::PingResponse resp_;
};

class StreamStepTrip final : public RoundTrip {
 public:
  StreamStepTrip(v1::StateCache::Stub& stub, int ops, bool packed = false)
      : stub_(stub), packed_(packed), sched_(Attach(stub), ops, 11) {
    stream_ = stub_.StepStream(&ctx_);
    for (int i = 0; i < 50; ++i) {  // fill the running batch, untimed
      if (!stream_->Write(sched_.NextPass()) || !stream_->Read(&resp_)) {
        std::exit(1);
      }
    }
  }
  ~StreamStepTrip() override {
    stream_->WritesDone();
    (void)stream_->Finish();
    Detach(stub_, sched_.session());
  }
  void Prepare() override { req_ = sched_.NextPass(packed_); }
  void Call() override {
    if (!stream_->Write(req_) || !stream_->Read(&resp_)) {
      std::fprintf(stderr, "stream broke\n");
      std::exit(1);
    }
    CheckStep(resp_);
  }

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

double Throughput(const std::string& address, int sessions, double seconds) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> steps{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < sessions; ++t) {
    threads.emplace_back([&, t] {
      // One channel per session, as separate engines would have.
      grpc::ChannelArguments args;
      args.SetInt("grpc.channel_id", t);  // distinct subchannels
      auto channel = grpc::CreateCustomChannel(
          address, grpc::InsecureChannelCredentials(), args);
      auto stub = v1::StateCache::NewStub(channel);
      Scheduler sched(Attach(*stub), 64, 100 + t);
      grpc::ClientContext ctx;
      auto stream = stub->StepStream(&ctx);
      v1::StepResponse resp;
      while (!stop.load(std::memory_order_relaxed)) {
        if (!stream->Write(sched.NextPass()) || !stream->Read(&resp)) break;
        steps.fetch_add(1, std::memory_order_relaxed);
      }
      stream->WritesDone();
      (void)stream->Finish();
      Detach(*stub, sched.session());
    });
  }
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  const double elapsed =
      std::chrono::duration<double>(Clock::now() - t0).count();
  for (auto& th : threads) th.join();
  return steps.load() / elapsed;
}

// ------------------------------------------------------- client library

// The same passes through statecache::Client (Step or StepStreamed): what a
// C++ scheduler using the client library sees, results converted included.
class ClientStepTrip final : public RoundTrip {
 public:
  ClientStepTrip(const std::string& address, int ops, bool streamed)
      : streamed_(streamed),
        sched_("unused", ops, 7) {  // the client names the session
    auto client = Client::Connect(address, ClientOptions{.keepalive = false});
    if (!client.ok()) std::exit(1);
    client_ = *std::move(client);
    ModelIdentity identity;
    identity.model_id = "bench";
    identity.hash_block_size = kBlock;
    if (!client_->Attach(identity, "rpc_bench").ok()) std::exit(1);
    for (int i = 0; i < 50; ++i) (void)Step(sched_.NextBuilder());
  }
  ~ClientStepTrip() override { (void)client_->Detach(); }
  void Prepare() override { builder_ = sched_.NextBuilder(); }
  void Call() override {
    absl::StatusOr<StepResults> results = Step(builder_);
    if (!results.ok()) {
      std::fprintf(stderr, "client step: %s\n",
                   results.status().ToString().c_str());
      std::exit(1);
    }
  }

 private:
  absl::StatusOr<StepResults> Step(const StepBuilder& b) {
    return streamed_ ? client_->StepStreamed(b) : client_->Step(b);
  }
  const bool streamed_;
  Scheduler sched_;
  std::unique_ptr<Client> client_;
  StepBuilder builder_;
};

// A StateCache in this process as the daemon runs it by default (metrics
// on, a sample of the operations timed: --operation_timing_interval), with
// one attached session whose scheduler has filled its running batch (50
// passes, untimed).
struct InProcessCache {
  std::unique_ptr<StateCache> cache;
  std::unique_ptr<Metrics> metrics;
  std::unique_ptr<Scheduler> sched;

  explicit InProcessCache(int ops) {
    StateCacheOptions options;
    options.identity.set_model_id("bench");
    options.identity.set_hash_block_size(kBlock);
    options.num_slots = kSlots;
    options.transfer = *StateTransfer::Create(TransferKind::kFork, 1, true);
    options.operation_timing_interval =
        absl::GetFlag(FLAGS_operation_timing_interval);
    cache = *StateCache::Create(std::move(options));
    metrics = std::make_unique<Metrics>(cache.get(),
                                        Metrics::Options{.version = "bench"});
    cache->AddObserver(metrics.get());
    v1::AttachRequest attach;
    attach.mutable_identity()->set_model_id("bench");
    attach.mutable_identity()->set_hash_block_size(kBlock);
    v1::AttachResponse attached;
    (void)cache->Attach(attach, &attached);
    sched = std::make_unique<Scheduler>(attached.session_id(), ops, 7);
    for (int i = 0; i < 50; ++i) {
      v1::StepResponse resp;
      (void)cache->Step(sched->NextPass(), &resp);
    }
  }
};

// The same passes through StateCache::Step in this process: what the core
// costs, without gRPC, protobuf parsing or the socket.
// With `wire`, each pass also makes the trip protobuf makes between the
// processes: the request serialised and parsed (onto the call's arena), the
// response serialised and parsed back; what is left between this and a
// unary Step is gRPC and the socket.
Latency InProcessStepLatency(int ops, int n, bool wire = false,
                             bool packed = false) {
  InProcessCache in(ops);
  StateCache* cache = in.cache.get();
  Scheduler& sched = *in.sched;
  std::vector<double> us;
  us.reserve(n);
  for (int i = 0; i < n; ++i) {
    const v1::StepRequest req = sched.NextPass(packed);
    // Request and response on a per-call arena, as the daemon's
    // ArenaMessageAllocator gives them.
    google::protobuf::Arena arena(MessageArenaOptions());
    auto* server_req =
        google::protobuf::Arena::CreateMessage<v1::StepRequest>(&arena);
    auto* resp =
        google::protobuf::Arena::CreateMessage<v1::StepResponse>(&arena);
    v1::StepResponse client_resp;
    const auto t0 = Clock::now();
    if (wire) {
      if (!server_req->ParseFromString(req.SerializeAsString())) std::exit(1);
      (void)cache->Step(*server_req, resp);
      if (!client_resp.ParseFromString(resp->SerializeAsString())) {
        std::exit(1);
      }
    } else {
      (void)cache->Step(req, resp);
    }
    us.push_back(MicrosSince(t0));
    CheckStep(*resp);
  }
  return Summarise(us);
}

// ------------------------------------------------------- the reference pool

// The reference table: the pool calls one 256-op pass makes, run on the
// reference pool (shared/reference/state_slot_pool.py, in a Python process:
// the in-process pool a Python scheduler calls today), against what the same
// pass costs this project in-process and over the socket.
//
// The calls are recorded as a pool trace (shared/reference/TRACE_FORMAT.md)
// by PoolCallRecorder: a pass writer (Scheduler::BuildPass's `Out`) that,
// for each operation, makes on a SlotPool of its own the pool calls that
// the pool's verb for that operation makes (daemon/core/slot_memory.cc, and
// the pin clock in daemon/service/sessions.cc), in the same order, with the
// same arguments and the same short-circuits, and writes each call as a
// trace line. The results it needs
// to go on (the slots popped, a checkpoint's new slot) come from running
// each line through replay::Invoke, as statecache-replay would. The mapping,
// for the operations these passes use:
//
//   begin_pass     release_pins (the clock's EndDeferral / ReleasePin per pin
//   of
//                  the session, in slot order, is release_pins when one
//                  session holds every pin, as here)
//   admit          num_free; resumable_hit(seq, kv_hit, hashes, false); on a
//                  hit: lookup(its last hash), is_pinned(src), is_free(src)
//                  unless pinned, and if the checkpoint is readable:
//                  promote(src), claim(src) unless pinned, num_free, then
//                  pop_many(width) + pin(src, false) (fork), or
//                  invalidate(src) + pop_many(width - 1) (adopt); else
//                  pop_many(width)
//   checkpoint     checkpoint(seq, boundary_blocks, hash)
//   consume_fork   none (the session's bookkeeping only)
//   release        release_many(slots); drop_reader(src) while its fork
//                  source is still pinned for it
//   resumable_hit  resumable_hit(seq, kv_hit, hashes, false)
//
// where seq is the request's (state_slot its first slot, num_tokens and
// midstep_anchor_pos from its admit). Only the path these passes take is
// mirrored: one session, every operation accepted (Apply's validation makes
// no pool call and is not repeated), no reservations, no resize. Every run
// checks the mirror: after the same passes the recorder's pool must equal
// (PoolSnapshot, every field) the pool of a StateCache that ran them.
class PoolCallRecorder {
 public:
  PoolCallRecorder() {
    lines_.push_back(absl::StrCat(
        "{\"op\":\"config\",\"num_slots\":", kSlots,
        ",\"hash_block_size\":", kBlock,
        ",\"enabled\":true,\"transfer\":{\"kind\":\"fork\",\"fork_tokens\":1,"
        "\"readable_midstep\":true}}"));
    const replay::ParsedLine config = replay::ParseLine(lines_[0]);
    absl::StatusOr<SlotPool> pool = replay::MakePool(config.config);
    if (config.kind != replay::ParsedLine::Kind::kConfig || !pool.ok()) {
      std::fprintf(stderr, "rpc_bench: the trace's config is refused\n");
      std::exit(1);
    }
    config_ = config.config;
    pool_.emplace(*std::move(pool));
    results_.push_back("{\"ok\":true}");
  }

  // The pass writer (see Scheduler::BuildPass).
  size_t size() const { return ops_; }
  void BeginPass() {
    ops_ = 1;
    (void)Call("{\"op\":\"release_pins\"}");
    for (auto it = pins_.begin(); it != pins_.end();) {
      if (it->second.deferred) {
        it->second.deferred = false;
        ++it;
        continue;
      }
      for (const std::string& reader : it->second.readers) {
        auto r = requests_.find(reader);
        if (r != requests_.end()) r->second.fork_src = -1;
      }
      it = pins_.erase(it);
    }
  }
  void Release(const std::string& id) {
    ++ops_;
    Request& r = requests_.at(id);
    (void)Call(absl::StrCat(
        "{\"op\":\"release_many\",\"slots\":", Ints(r.slots), "}"));
    if (r.fork_src >= 0) {
      auto pin = pins_.find(r.fork_src);
      if (pin != pins_.end()) {
        (void)Call(
            absl::StrCat("{\"op\":\"drop_reader\",\"slot\":", r.fork_src, "}"));
        pin->second.readers.erase(id);
        if (--pin->second.count == 0) pins_.erase(pin);
      }
    }
    requests_.erase(id);
  }
  void ConsumeFork(const std::string& id) {
    ++ops_;
    Request& r = requests_.at(id);
    if (r.fork_src >= 0) {
      RemoveReader(r.fork_src, id);
      r.fork_src = -1;
    }
  }
  void Checkpoint(const std::string& id, int64_t blocks, int64_t hash) {
    ++ops_;
    Request& r = requests_.at(id);
    const auto forked = std::get<CheckpointResult>(Call(absl::StrCat(
        "{\"op\":\"checkpoint\",\"seq\":", Seq(r),
        ",\"boundary_blocks\":", blocks, ",\"hash\":", hash, "}")));
    if (forked.state_fork_src < 0) return;
    r.slots[0] = forked.state_slot;
    if (r.fork_src >= 0) RemoveReader(r.fork_src, id);
    Pin& pin = pins_[forked.state_fork_src];
    ++pin.count;
    pin.deferred = true;
    pin.readers.insert(id);
    r.fork_src = forked.state_fork_src;
  }
  void Admit(const std::string& id, int32_t width, int64_t num_tokens,
             int64_t anchor_pos, const std::vector<int64_t>& hashes,
             int32_t kv_hit) {
    ++ops_;
    if (NumFree() < width) return;  // refused: admit it later
    Request r;
    r.num_tokens = num_tokens;
    r.anchor_pos = anchor_pos;
    int64_t hit = std::get<int64_t>(Call(
        absl::StrCat("{\"op\":\"resumable_hit\",\"seq\":", Seq(r),
                     ",\"hit\":", kv_hit, ",\"block_hashes\":", Ints(hashes),
                     ",\"assume_checkpointed\":false}")));
    int64_t src = -1;
    bool src_pinned = false;
    if (hit > 0) {
      src = std::get<int64_t>(Call(
          absl::StrCat("{\"op\":\"lookup\",\"hash\":", hashes[hit - 1], "}")));
      const bool in_range = src >= 0 && src < pool_->num_slots();
      src_pinned =
          in_range && std::get<bool>(Call(absl::StrCat(
                          "{\"op\":\"is_pinned\",\"slot\":", src, "}")));
      if (!in_range ||
          (!src_pinned && !std::get<bool>(Call(absl::StrCat(
                              "{\"op\":\"is_free\",\"slot\":", src, "}"))))) {
        hit = 0;
        src = -1;
      }
    }
    if (hit > 0) {
      (void)Call(absl::StrCat("{\"op\":\"promote\",\"slot\":", src, "}"));
      if (!src_pinned) {
        (void)Call(absl::StrCat("{\"op\":\"claim\",\"slot\":", src, "}"));
      }
      if (NumFree() >= width) {
        r.slots = PopMany(width);
        (void)Call(absl::StrCat("{\"op\":\"pin\",\"slot\":", src,
                                ",\"reader_is_next_batch\":false}"));
        Pin& pin = pins_[src];
        ++pin.count;
        pin.readers.insert(id);
        r.fork_src = src;
      } else {
        (void)Call(absl::StrCat("{\"op\":\"invalidate\",\"slot\":", src, "}"));
        r.slots = {src};
        for (int64_t s : PopMany(width - 1)) r.slots.push_back(s);
      }
    } else {
      r.slots = PopMany(width);
    }
    requests_[id] = std::move(r);
  }
  void ResumableHit(int64_t num_tokens, const std::vector<int64_t>& hashes,
                    int32_t kv_hit) {
    ++ops_;
    Request query;
    query.num_tokens = num_tokens;
    (void)Call(absl::StrCat(
        "{\"op\":\"resumable_hit\",\"seq\":", Seq(query), ",\"hit\":", kv_hit,
        ",\"block_hashes\":", Ints(hashes), ",\"assume_checkpointed\":false}"));
  }

  // The trace: the config line, then one line per call.
  const std::vector<std::string>& lines() const { return lines_; }
  // One result per line, as statecache-replay prints them.
  const std::vector<std::string>& results() const { return results_; }
  const std::vector<replay::Call>& calls() const { return calls_; }
  const replay::PoolConfig& config() const { return config_; }
  PoolSnapshot Dump() const { return pool_->Dump(); }

 private:
  struct Request {
    std::vector<int64_t> slots;
    int64_t fork_src = -1;
    int64_t num_tokens = 0;
    int64_t anchor_pos = 0;
  };
  // The session's pin of a slot (StateCache's SessionPin).
  struct Pin {
    int count = 0;
    bool deferred = false;
    std::set<std::string> readers;
  };

  // Records `line` and runs it; a refused call means the mirror is wrong.
  replay::Value Call(std::string line) {
    replay::ParsedLine parsed = replay::ParseLine(line);
    if (parsed.kind != replay::ParsedLine::Kind::kCall) {
      std::fprintf(stderr, "rpc_bench: recorded a bad trace line: %s: %s\n",
                   line.c_str(), parsed.error.c_str());
      std::exit(1);
    }
    replay::CallResult result = replay::Invoke(*pool_, parsed.call);
    if (!result.status.ok()) {
      std::fprintf(stderr, "rpc_bench: the pool refused recorded call %s: %s\n",
                   line.c_str(), result.status.ToString().c_str());
      std::exit(1);
    }
    results_.push_back(replay::FormatResult(result));
    lines_.push_back(std::move(line));
    calls_.push_back(std::move(parsed.call));
    return std::move(result.value);
  }
  int64_t NumFree() { return std::get<int64_t>(Call("{\"op\":\"num_free\"}")); }
  std::vector<int64_t> PopMany(int64_t count) {
    return std::get<std::vector<int64_t>>(
        Call(absl::StrCat("{\"op\":\"pop_many\",\"count\":", count, "}")));
  }
  void RemoveReader(int64_t slot, const std::string& id) {
    auto pin = pins_.find(slot);
    if (pin != pins_.end()) pin->second.readers.erase(id);
  }
  static std::string Ints(const std::vector<int64_t>& v) {
    return absl::StrCat("[", absl::StrJoin(v, ","), "]");
  }
  // StateCache::SequenceOf.
  static std::string Seq(const Request& r) {
    return absl::StrCat("{\"state_slot\":", r.slots.empty() ? -1 : r.slots[0],
                        ",\"num_tokens\":", r.num_tokens,
                        ",\"has_per_req_cache\":true,\"midstep_anchor_pos\":",
                        r.anchor_pos, ",\"checkpoint_end_pos\":0}");
  }

  std::vector<std::string> lines_;
  std::vector<std::string> results_;
  std::vector<replay::Call> calls_;
  replay::PoolConfig config_;
  std::optional<SlotPool> pool_;
  size_t ops_ = 0;
  absl::flat_hash_map<std::string, Request> requests_;
  std::map<int64_t, Pin> pins_;  // in slot order, as release_pins goes
};

// The pool calls of `warmup` + `passes` 256-op passes of the in-process
// row's scheduler (seed 7: the passes InProcessStepLatency and
// UnaryStepTrip run), and where each timed pass's calls start and end.
struct RecordedPasses {
  PoolCallRecorder recorder;
  int64_t untimed_calls = 0;        // the warm-up passes'
  std::vector<int64_t> pass_calls;  // one per timed pass
};

std::unique_ptr<RecordedPasses> RecordPasses(int ops, int warmup, int passes) {
  auto out = std::make_unique<RecordedPasses>();
  Scheduler sched("unused", ops, 7);
  for (int i = 0; i < warmup; ++i) sched.NextPassInto(out->recorder);
  out->untimed_calls = static_cast<int64_t>(out->recorder.calls().size());
  for (int i = 0; i < passes; ++i) {
    const size_t before = out->recorder.calls().size();
    sched.NextPassInto(out->recorder);
    out->pass_calls.push_back(
        static_cast<int64_t>(out->recorder.calls().size() - before));
  }
  // The mirror's check: a StateCache that ran the same passes has the same
  // pool.
  InProcessCache in(ops);  // its first 50 passes
  for (int i = warmup; i < warmup + passes; ++i) {
    v1::StepResponse resp;
    (void)in.cache->Step(in.sched->NextPass(/*packed=*/true), &resp);
    CheckStep(resp);
  }
  if (warmup != 50 || in.cache->DumpPool() != out->recorder.Dump()) {
    std::fprintf(
        stderr,
        "rpc_bench: the recorded pool calls leave the pool otherwise "
        "than StateCache's Step of the same passes: the mirror in "
        "PoolCallRecorder no longer matches daemon/core/slot_memory.cc\n");
    std::exit(1);
  }
  return out;
}

bool Readable(const std::string& path) {
  return access(path.c_str(), R_OK) == 0;
}

void WriteLines(const std::string& path,
                const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) absl::StrAppend(&text, line, "\n");
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr ||
      std::fwrite(text.data(), 1, text.size(), f) != text.size() ||
      std::fclose(f) != 0) {
    std::fprintf(stderr, "rpc_bench: cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

// The reference table's own measurements: the recorded calls on the
// reference (reference_timing.py --paced --passes, a child process) and on
// SlotPool, one run each per call of Reference / SlotPoolPass.
class ReferenceComparison {
 public:
  // Records the trace, checks it on the reference, starts the timing
  // script. Null, with `why` set, when the reference is not there.
  static std::unique_ptr<ReferenceComparison> Start(int passes,
                                                    std::string* why) {
    const std::string ref = absl::GetFlag(FLAGS_reference_dir);
    const std::string python = absl::GetFlag(FLAGS_python);
    const std::string script = absl::StrCat(absl::GetFlag(FLAGS_source_dir),
                                            "/bench/reference_timing.py");
    if (!Readable(absl::StrCat(ref, "/run_trace.py"))) {
      *why = absl::StrCat("no run_trace.py in --reference_dir=", ref,
                          " (a clone has no ../shared/reference beside it)");
      return nullptr;
    }
    if (access(python.c_str(), X_OK) != 0 || !Readable(script)) {
      *why = absl::StrCat("cannot run ", python, " ", script);
      return nullptr;
    }
    std::unique_ptr<ReferenceComparison> c(new ReferenceComparison);
    c->recorded_ = RecordPasses(256, 50, passes);
    const std::string kept = absl::GetFlag(FLAGS_pool_trace);
    if (kept.empty()) {
      char tmpl[] = "/tmp/rpc_bench_trace.XXXXXX";
      if (mkdtemp(tmpl) == nullptr) std::abort();
      c->dir_ = tmpl;
      c->trace_ = c->dir_ + "/pass.jsonl";
    } else {
      c->trace_ = kept;
    }
    c->passes_ = c->trace_ + ".passes.json";
    const RecordedPasses& rec = *c->recorded_;
    WriteLines(c->trace_, rec.recorder.lines());
    WriteLines(c->passes_,
               {absl::StrCat("{\"untimed_calls\":", rec.untimed_calls,
                             ",\"pass_calls\":[",
                             absl::StrJoin(rec.pass_calls, ","), "]}")});
    // The reference must give, line for line, the results SlotPool gave:
    // the same calls accepted, the same slots handed out.
    const std::string got = c->dir_.empty() ? kept + ".reference.jsonl"
                                            : c->dir_ + "/reference.jsonl";
    const std::string cmd = absl::StrCat(python, " ", ref, "/run_trace.py ",
                                         c->trace_, " -o ", got);
    if (std::system(cmd.c_str()) != 0) {
      std::printf("WARNING: the reference failed on the recorded trace (%s)\n",
                  cmd.c_str());
    } else {
      std::ifstream in(got);
      size_t line_no = 0, differ = 0;
      for (std::string line; std::getline(in, line); ++line_no) {
        if (line_no >= rec.recorder.results().size() ||
            line != rec.recorder.results()[line_no]) {
          if (differ++ == 0) {
            std::printf(
                "WARNING: the reference's result of trace line %zu differs "
                "from SlotPool's: %s vs %s\n",
                line_no + 1, line.c_str(),
                line_no < rec.recorder.results().size()
                    ? rec.recorder.results()[line_no].c_str()
                    : "(none)");
          }
        }
      }
      if (line_no != rec.recorder.results().size() && differ == 0) {
        std::printf("WARNING: the reference gave %zu results for %zu lines\n",
                    line_no, rec.recorder.results().size());
      }
      c->identical_ = differ == 0 && line_no == rec.recorder.results().size();
    }
    std::remove(got.c_str());
    c->script_ = std::make_unique<PacedReference>(
        absl::StrCat(python, " ", script, " --paced --reference-dir ", ref,
                     " --passes ", c->passes_, " ", c->trace_));
    return c;
  }
  ~ReferenceComparison() {
    script_.reset();
    if (!dir_.empty()) {
      std::remove(trace_.c_str());
      std::remove(passes_.c_str());
      rmdir(dir_.c_str());
    }
  }

  // One run of the reference on the timed passes: p50 and p99 of a pass.
  Latency Reference() {
    const std::string line = script_->RunOnce();
    long long calls = 0, ns = 0, passes = 0, p50 = 0, p99 = 0;
    if (std::sscanf(line.c_str(),
                    "calls=%lld ns=%lld passes=%lld p50_ns=%lld p99_ns=%lld",
                    &calls, &ns, &passes, &p50, &p99) != 5 ||
        passes != static_cast<long long>(recorded_->pass_calls.size())) {
      std::fprintf(stderr, "rpc_bench: the reference's timing script failed\n");
      std::exit(1);
    }
    return {p50 / 1e3, p99 / 1e3};
  }
  // The same on SlotPool: a fresh pool, the warm-up calls untimed, then
  // pass by pass through replay::Invoke (as statecache-replay runs a trace).
  Latency SlotPoolPass() const {
    const RecordedPasses& rec = *recorded_;
    const std::vector<replay::Call>& calls = rec.recorder.calls();
    SlotPool pool = *replay::MakePool(rec.recorder.config());
    size_t at = 0;
    for (; at < static_cast<size_t>(rec.untimed_calls); ++at) {
      (void)replay::Invoke(pool, calls[at]);
    }
    std::vector<double> us;
    for (int64_t n : rec.pass_calls) {
      const auto t0 = Clock::now();
      for (int64_t i = 0; i < n; ++i, ++at) {
        (void)replay::Invoke(pool, calls[at]);
      }
      us.push_back(MicrosSince(t0));
    }
    return Summarise(us);
  }

  // "N passes of M calls (median)", where the trace is, and whether the
  // reference agreed with SlotPool on every result.
  std::string Describe() const {
    std::vector<int64_t> sizes = recorded_->pass_calls;
    std::sort(sizes.begin(), sizes.end());
    return absl::StrCat(
        sizes.size(), " timed passes after 50 untimed, ",
        sizes[sizes.size() / 2], " pool calls per pass (median; ",
        sizes.front(), "-", sizes.back(), "); trace ",
        dir_.empty() ? trace_ : "in a temporary file",
        identical_ ? "; run_trace.py's results identical to SlotPool's"
                   : "; run_trace.py's results DIFFER from SlotPool's");
  }

 private:
  ReferenceComparison() = default;
  std::unique_ptr<RecordedPasses> recorded_;
  std::string dir_;  // temporary, removed; empty with --pool_trace
  std::string trace_;
  std::string passes_;
  bool identical_ = false;
  std::unique_ptr<PacedReference> script_;
};

// The same 256-op passes taken apart stage by stage, each timed on its own
// (median of n): what each side pays to carry a pass through gRPC's own
// serialisation (grpc::SerializationTraits into and out of a ByteBuffer, the
// path a call takes), next to the core's Step. With --evict_kb, other
// memory is written between passes first: in a hot loop every stage finds
// its data in cache, which a pass between two waits on a socket does not.
void WireBreakdown(int ops, int n, bool packed) {
  InProcessCache in(ops);
  StateCache* cache = in.cache.get();
  Scheduler& sched = *in.sched;
  std::vector<double> t[5];
  size_t req_bytes = 0, resp_bytes = 0;
  v1::StepResponse client_resp;
  const size_t evict_bytes =
      static_cast<size_t>(std::max(0, absl::GetFlag(FLAGS_evict_kb))) << 10;
  std::vector<char> other(evict_bytes);
  for (int i = 0; i < n; ++i) {
    const v1::StepRequest req = sched.NextPass(packed);
    // One write per line.
    for (size_t k = 0; k < evict_bytes; k += 64) ++other[k];
    google::protobuf::Arena arena(MessageArenaOptions());
    auto* server_req =
        google::protobuf::Arena::CreateMessage<v1::StepRequest>(&arena);
    auto* resp =
        google::protobuf::Arena::CreateMessage<v1::StepResponse>(&arena);
    grpc::ByteBuffer req_buf, resp_buf;
    bool own = false;
    auto t0 = Clock::now();
    (void)grpc::SerializationTraits<v1::StepRequest>::Serialize(req, &req_buf,
                                                                &own);
    t[0].push_back(MicrosSince(t0));
    req_bytes = req_buf.Length();
    t0 = Clock::now();
    if (!grpc::SerializationTraits<v1::StepRequest>::Deserialize(&req_buf,
                                                                 server_req)
             .ok()) {
      std::exit(1);
    }
    t[1].push_back(MicrosSince(t0));
    t0 = Clock::now();
    (void)cache->Step(*server_req, resp);
    t[2].push_back(MicrosSince(t0));
    t0 = Clock::now();
    (void)grpc::SerializationTraits<v1::StepResponse>::Serialize(
        *resp, &resp_buf, &own);
    t[3].push_back(MicrosSince(t0));
    resp_bytes = resp_buf.Length();
    client_resp.Clear();
    t0 = Clock::now();
    if (!grpc::SerializationTraits<v1::StepResponse>::Deserialize(&resp_buf,
                                                                  &client_resp)
             .ok()) {
      std::exit(1);
    }
    t[4].push_back(MicrosSince(t0));
  }
  const char* names[] = {"client: serialise request", "daemon: parse request",
                         "daemon: Step (core)", "daemon: serialise response",
                         "client: parse response"};
  std::printf(
      "a %d-op pass%s stage by stage (request %zu bytes, response %zu "
      "bytes; %s), p50 us:\n",
      ops, packed ? ", packed," : "", req_bytes, resp_bytes,
      evict_bytes == 0
          ? "caches warm"
          : absl::StrCat(evict_bytes >> 10, " KiB written between passes")
                .c_str());
  double total = 0;
  for (int k = 0; k < 5; ++k) {
    const double m = Summarise(t[k]).p50_us;
    total += m;
    std::printf("  %-28s %8.1f\n", names[k], m);
  }
  std::printf("  %-28s %8.1f\n", "sum", total);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One row of a table of MeasurePaired runs ({row, its Ping} per run): the
// medians over the runs of the row's p50, its Ping's, their difference and
// ratio, and of `last`, the table's own column.
void PrintPairedRow(
    const std::string& name,
    const std::vector<std::pair<Latency, Latency>>& runs,
    const std::function<double(const Latency&, const Latency&)>& last) {
  std::vector<double> p50, ping50, extra, r50, col;
  for (const auto& [l, ping] : runs) {
    p50.push_back(l.p50_us);
    ping50.push_back(ping.p50_us);
    extra.push_back(l.p50_us - ping.p50_us);
    r50.push_back(l.p50_us / ping.p50_us);
    col.push_back(last(l, ping));
  }
  std::printf("  %-22s %10.1f %10.1f %10.1f %11.2fx %11.2fx\n", name.c_str(),
              Median(p50), Median(ping50), Median(extra), Median(r50),
              Median(col));
}

// What handler time costs in round trip on this machine: Pings to a
// BusyPingServer whose handler busy-waits 5, 10, 20 us and as long as the
// 256-op packed pass's core takes in-process (measured here first), each
// paired (MeasurePaired) with Pings whose handler returns at once, every call
// after its client built a 256-op packed pass as the Step row does. Where a
// round trip costs only the wire and the handler's time, `- Ping` equals the
// busy time; on a VM whose vCPUs halt while they wait it is a multiple of it.
void HandlerCalibration(int n, int reps) {
  std::vector<double> core_us;
  for (int r = 0; r < reps; ++r) {
    core_us.push_back(
        InProcessStepLatency(256, n, /*wire=*/false, /*packed=*/true).p50_us);
  }
  const double core = Median(core_us);
  BusyPingServer server;
  auto stub = v1::StateCache::NewStub(grpc::CreateChannel(
      server.address(), grpc::InsecureChannelCredentials()));
  {
    PingTrip warm(*stub);
    (void)Measure(warm, 200);
  }
  const std::vector<double> busy_us = {5, 10, 20, core};
  // [busy][rep] -> {busy Ping, its do-nothing Ping}
  std::vector<std::vector<std::pair<Latency, Latency>>> runs(busy_us.size());
  for (int r = 0; r < reps; ++r) {
    for (size_t i = 0; i < busy_us.size(); ++i) {
      PingTrip busy(*stub, 256, PassForm::kPacked,
                    static_cast<int64_t>(busy_us[i] * 1000));
      PingTrip ping(*stub, 256, PassForm::kPacked);
      runs[i].push_back(MeasurePaired(busy, ping, n));
    }
  }
  std::printf(
      "\nhandler calibration: Pings to a bare callback server (%s) whose "
      "handler busy-waits, paired with its do-nothing Ping as above; the "
      "last row waits as long as the 256-op packed pass's core takes "
      "in-process (p50, median of %d runs); `- Ping` / busy: round-trip "
      "microseconds per microsecond of handler time\n",
      server.address().c_str(), reps);
  std::printf("  %-22s %10s %10s %10s %12s %12s\n", "handler busy", "p50 us",
              "Ping p50", "- Ping", "p50/Ping", "- Ping/busy");
  for (size_t i = 0; i < busy_us.size(); ++i) {
    const std::string name =
        i + 1 < busy_us.size()
            ? absl::StrCat(busy_us[i], " us")
            : absl::StrFormat("%.1f us (256-op core)", busy_us[i]);
    PrintPairedRow(name, runs[i], [&](const Latency& l, const Latency& ping) {
      return (l.p50_us - ping.p50_us) / busy_us[i];
    });
  }
}

}  // namespace
}  // namespace statecache

int main(int argc, char** argv) {
  using namespace statecache;
  absl::ParseCommandLine(argc, argv);
  if (!absl::GetFlag(FLAGS_busy_server).empty()) {
    return RunBusyPingServer(absl::GetFlag(FLAGS_busy_server),
                             absl::GetFlag(FLAGS_busy_server_ready_fd));
  }
  // Before any thread or server process starts: both inherit it.
  PinTo(absl::GetFlag(FLAGS_client_cpus), "client_cpus");
  if (absl::GetFlag(FLAGS_wire_breakdown)) {
    for (int ops : {64, 256}) {
      for (bool packed : {false, true}) {
        WireBreakdown(ops, absl::GetFlag(FLAGS_iterations), packed);
      }
    }
    return 0;
  }
  if (absl::GetFlag(FLAGS_in_process_only)) {
    for (int ops : {64, 256}) {
      for (bool packed : {false, true}) {
        for (bool wire : {false, true}) {
          const std::string name = absl::StrCat(
              "in-process", packed ? ", packed" : "",
              wire ? " + protobuf both ways" : "", ", ", ops, " ops");
          if (!absl::StrContains(name, absl::GetFlag(FLAGS_rows))) continue;
          Latency l = InProcessStepLatency(ops, absl::GetFlag(FLAGS_iterations),
                                           wire, packed);
          std::printf("%s: p50 %.1f us, p99 %.1f us\n", name.c_str(), l.p50_us,
                      l.p99_us);
        }
      }
    }
    return 0;
  }
  PrintPlatform();
  const int n = absl::GetFlag(FLAGS_iterations);
  const int reps = absl::GetFlag(FLAGS_reps);
  // The reference table's trace, recorded and checked before anything is
  // timed; null when it does not run (one line says why).
  std::unique_ptr<ReferenceComparison> comparison;
  {
    std::string why = "--reference=false";
    if (absl::GetFlag(FLAGS_reference)) {
      comparison = ReferenceComparison::Start(
          std::max(1, std::min(n, absl::GetFlag(FLAGS_reference_passes))),
          &why);
    }
    if (comparison == nullptr) {
      std::printf("reference rows not run: %s\n", why.c_str());
    }
  }
  Daemon daemon;
  auto channel =
      grpc::CreateChannel(daemon.address(), grpc::InsecureChannelCredentials());
  auto stub = v1::StateCache::NewStub(channel);
  {
    PingTrip warm(*stub);  // warm the channel
    (void)Measure(warm, 200);
  }

  // A latency row: a round trip over the socket (`trip`), or, for the
  // in-process rows, a measurement of its own (`run`). `paired` rows are
  // also timed against a Ping whose client first builds a pass of `ops`
  // operations in the same form.
  struct Row {
    const char* name = "";
    std::function<std::unique_ptr<RoundTrip>()> trip = nullptr;
    std::function<Latency()> run = nullptr;
    bool paired = false;
    int ops = 0;
    PassForm form = PassForm::kList;
    // Measure's gap, also the paired Ping's.
    std::chrono::microseconds gap{};
    // A row of the reference table (run whatever --rows says, while that
    // table runs); `reference_only`: printed there alone.
    bool reference_table = false;
    bool reference_only = false;
  };
  auto in_reference_table = [](Row row) {
    row.reference_table = true;
    return row;
  };
  auto unary_row = [&](const char* name, int ops, bool packed) {
    return Row{.name = name,
               .trip =
                   [&stub, ops, packed] {
                     return std::make_unique<UnaryStepTrip>(*stub, ops, false,
                                                            packed);
                   },
               .paired = true,
               .ops = ops,
               .form = packed ? PassForm::kPacked : PassForm::kList};
  };
  auto stream_row = [&](const char* name, int ops, bool packed) {
    return Row{.name = name,
               .trip =
                   [&stub, ops, packed] {
                     return std::make_unique<StreamStepTrip>(*stub, ops,
                                                             packed);
                   },
               .paired = true,
               .ops = ops,
               .form = packed ? PassForm::kPacked : PassForm::kList};
  };
  auto client_row = [&](const char* name, bool streamed) {
    return Row{.name = name,
               .trip =
                   [&daemon, streamed] {
                     return std::make_unique<ClientStepTrip>(daemon.address(),
                                                             256, streamed);
                   },
               .paired = true,
               .ops = 256,
               .form = PassForm::kBuilder};
  };
  const std::vector<Row> rows = {
      {.name = "Ping (baseline)",
       .trip = [&] { return std::make_unique<PingTrip>(*stub); }},
      {.name = "  Ping, 30 us after",
       .trip = [&] { return std::make_unique<PingTrip>(*stub); },
       .gap = std::chrono::microseconds(30)},
      {.name = "  Ping, 1 ms after",
       .trip = [&] { return std::make_unique<PingTrip>(*stub); },
       .gap = std::chrono::microseconds(1000)},
      unary_row("Step, 1 op", 1, false),
      unary_row("Step, 64 ops", 64, false),
      unary_row("Step, 256 ops", 256, false),
      {.name = "  Ping + 256 ops' bytes",
       .trip =
           [&] { return std::make_unique<PingWithPassBytesTrip>(*stub, 256); }},
      {.name = "  256 ops, refused",
       .trip =
           [&] {
             return std::make_unique<UnaryStepTrip>(*stub, 256,
                                                    /*refused=*/true);
           }},
      unary_row("Step, 64 ops, packed", 64, true),
      in_reference_table(unary_row("Step, 256 ops, packed", 256, true)),
      {.name = "  packed, 1 ms apart",
       .trip =
           [&] {
             return std::make_unique<UnaryStepTrip>(*stub, 256, false, true);
           },
       .paired = true,
       .ops = 256,
       .form = PassForm::kPacked,
       .gap = std::chrono::microseconds(1000)},
      stream_row("StepStream, 1 op", 1, false),
      stream_row("StepStream, 64 ops", 64, false),
      stream_row("StepStream, 256 ops", 256, false),
      in_reference_table(stream_row("StepStream, 256 ops, packed", 256, true)),
      client_row("Client::Step, 256 ops", false),
      client_row("Client stream, 256 ops", true),
      {.name = "in-process, 256 ops",
       .run = [&] { return InProcessStepLatency(256, n); }},
      {.name = "  + protobuf both ways",
       .run = [&] { return InProcessStepLatency(256, n, /*wire=*/true); }},
      {.name = "in-process, packed, 256 ops",
       .run =
           [&] {
             return InProcessStepLatency(256, n, /*wire=*/false,
                                         /*packed=*/true);
           },
       .reference_table = true},
      {.name = "reference pool (Python)",
       .run = [&] { return comparison->Reference(); },
       .reference_table = true,
       .reference_only = true},
      {.name = "SlotPool (C++)",
       .run = [&] { return comparison->SlotPoolPass(); },
       .reference_table = true,
       .reference_only = true},
  };
  // Each repetition runs every selected row in turn, so the machine's drift
  // (its speed moves by a half within a day) falls on all rows alike; a
  // row's ratio is the median of its repetitions' ratios to that
  // repetition's Ping.
  const std::string only = absl::GetFlag(FLAGS_rows);
  std::vector<const Row*> selected;
  for (const Row& row : rows) {
    const bool for_reference = comparison != nullptr && row.reference_table;
    if (selected.empty() || for_reference ||
        (!row.reference_only && absl::StrContains(row.name, only))) {
      selected.push_back(&row);
    }
  }
  std::vector<std::vector<Latency>> runs(selected.size());
  for (int r = 0; r < reps; ++r) {
    for (size_t i = 0; i < selected.size(); ++i) {
      const Row& row = *selected[i];
      if (row.trip) {
        std::unique_ptr<RoundTrip> trip = row.trip();
        runs[i].push_back(Measure(*trip, n, row.gap));
      } else {
        runs[i].push_back(row.run());
      }
    }
  }
  std::printf(
      "round trips over %s, %d per run, median of %d runs (each run goes "
      "through every row in turn)\n",
      daemon.address().c_str(), n, reps);
  std::printf("  %-22s %10s %10s %12s %12s\n", "call", "p50 us", "p99 us",
              "p50/Ping", "p99/Ping");
  for (size_t i = 0; i < selected.size(); ++i) {
    std::vector<double> p50, p99, r50, r99;
    for (int r = 0; r < reps; ++r) {
      const Latency& l = runs[i][r];
      const Latency& ping = runs[0][r];
      p50.push_back(l.p50_us);
      p99.push_back(l.p99_us);
      r50.push_back(l.p50_us / ping.p50_us);
      r99.push_back(l.p99_us / ping.p99_us);
    }
    if (selected[i]->reference_only) continue;
    std::printf("  %-22s %10.1f %10.1f %11.2fx %11.2fx\n", selected[i]->name,
                Median(p50), Median(p99), Median(r50), Median(r99));
  }

  // The reference table: the same 256-op pass on the reference pool in
  // Python, in-process, and this project's ways of making it, each as a
  // ratio to the reference (the median of the runs' ratios to their own
  // reference run).
  if (comparison != nullptr) {
    // {row, its label here}, the reference first.
    const std::pair<const char*, const char*> names[] = {
        {"reference pool (Python)",
         "reference pool (Python, in-process), its pool calls"},
        {"SlotPool (C++)",
         "statecache SlotPool, the same calls (replay::Invoke)"},
        {"in-process, packed, 256 ops",
         "statecache in-process core pass (StateCache::Step)"},
        {"Step, 256 ops, packed", "unary Step round trip"},
        {"StepStream, 256 ops, packed", "StepStream round trip"}};
    std::vector<std::pair<size_t, const char*>> table;
    for (const auto& [name, label] : names) {
      for (size_t i = 0; i < selected.size(); ++i) {
        if (std::string(selected[i]->name) == name)
          table.emplace_back(i, label);
      }
    }
    const size_t ref = table.front().first;
    std::printf(
        "\nreference: one 256-op pass's pool calls (%s) on the reference pool "
        "in Python in-process (%s), against the same pass through this "
        "project; p50 and p99 of a pass, median of %d runs; ratio: p50 / the "
        "reference's p50\n",
        comparison->Describe().c_str(), absl::GetFlag(FLAGS_python).c_str(),
        reps);
    std::printf("  %-53s %10s %10s %12s\n", "256-op pass (packed rows)",
                "p50 us", "p99 us", "p50/ref");
    for (const auto& [i, label] : table) {
      std::vector<double> p50, p99, ratio;
      for (int r = 0; r < reps; ++r) {
        p50.push_back(runs[i][r].p50_us);
        p99.push_back(runs[i][r].p99_us);
        ratio.push_back(runs[i][r].p50_us / runs[ref][r].p50_us);
      }
      std::printf("  %-53s %10.1f %10.1f %11.3fx\n", label, Median(p50),
                  Median(p99), Median(ratio));
    }
  }

  // The same rows paired with Ping (see MeasurePaired). In the table above
  // Ping runs in a loop of its own, back to back: the client does nothing
  // between calls, so the daemon's thread and both vCPUs stay hot, while
  // every Step row's client builds a pass between calls. Here each call,
  // Ping included, follows the same work.
  if (absl::GetFlag(FLAGS_paired)) {
    std::vector<const Row*> paired;
    for (const Row* row : selected) {
      if (row->paired) paired.push_back(row);
    }
    // [row][rep] -> {row, its Ping}
    std::vector<std::vector<std::pair<Latency, Latency>>> pruns(paired.size());
    for (int r = 0; r < reps; ++r) {
      for (size_t i = 0; i < paired.size(); ++i) {
        std::unique_ptr<RoundTrip> trip = paired[i]->trip();
        PingTrip ping(*stub, paired[i]->ops, paired[i]->form);
        pruns[i].push_back(MeasurePaired(*trip, ping, n, paired[i]->gap));
      }
    }
    std::printf(
        "\npaired with Ping: each run alternates blocks of the row's calls "
        "and of Pings (%d of each timed), every call after its client built "
        "a pass of the row's size (the Ping's is dropped) and, in a row "
        "`apart`, that long after the last call returned; `- Ping`: what "
        "the row's call costs over its Ping; median of %d runs\n",
        n, reps);
    std::printf("  %-22s %10s %10s %10s %12s %12s\n", "call", "p50 us",
                "Ping p50", "- Ping", "p50/Ping", "p99/Ping");
    for (size_t i = 0; i < paired.size(); ++i) {
      PrintPairedRow(paired[i]->name, pruns[i],
                     [](const Latency& l, const Latency& ping) {
                       return l.p99_us / ping.p99_us;
                     });
    }
  }
  if (absl::GetFlag(FLAGS_calibrate)) HandlerCalibration(n, reps);
  if (g_refused.load() > 0) {
    std::printf("WARNING: %lld operations refused (first: %s)\n",
                static_cast<long long>(g_refused.load()),
                g_first_refusal.c_str());
  }
  if (!absl::GetFlag(FLAGS_throughput)) return 0;
  std::printf(
      "\nthroughput: 64-op steps over StepStream, one session per thread\n");
  for (int sessions : {1, 4, 16}) {
    std::vector<double> rates;
    for (int r = 0; r < reps; ++r) {
      rates.push_back(
          Throughput(daemon.address(), sessions, absl::GetFlag(FLAGS_seconds)));
    }
    std::printf("  %2d sessions  %10.0f steps/s  (%.0f ops/s)\n", sessions,
                Median(rates), Median(rates) * 64);
  }
  return 0;
}
