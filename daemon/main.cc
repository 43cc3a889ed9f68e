// statecached: the per-accelerator recurrent-state cache daemon.
//
// Builds a StateCache from flags, serves it over gRPC (the scheduler and
// operator APIs, the standard health service and server reflection), runs
// the maintenance thread that expires leases and advances resizes, and shuts
// down cleanly on SIGTERM or SIGINT.
//
// Readiness: once serving, logs "statecached: listening on ADDR epoch=N"
// and, with --ready_fd=N, writes "ready\n" to fd N and closes it, so a
// supervisor or a test knows when to connect without sleeping.
//
// Exit codes: 0 after a clean shutdown, 1 when the server cannot start,
// 2 for a bad configuration.
#include <fcntl.h>
#include <grp.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/default_address.h"
#include "daemon/command_line.h"
#include "daemon/common/status_macros.h"
#include "daemon/core/slot_memory.h"
#include "daemon/core/state_transfer.h"
#include "daemon/device/device.h"
#include "daemon/device/host_device.h"
#include "daemon/device/layout_file.h"
#include "daemon/device/layout_presets.h"
#include "daemon/device/shm_name.h"
#include "daemon/grpc/arena_allocator.h"
#include "daemon/grpc/call_tracker.h"
#include "daemon/grpc/grpc_service.h"
#include "daemon/grpc/session_event_log.h"
#include "daemon/listen_address.h"
#include "daemon/metrics/metrics.h"
#include "daemon/service/log.h"
#include "daemon/service/state_cache.h"
#include "daemon/service/state_dir.h"
#include "daemon/service/state_keeper.h"
#include "daemon/serving.h"

ABSL_FLAG(std::string, listen, "",
          "Address to serve on. Default: unix:/run/statecache/statecached.sock "
          "as root, else unix:$XDG_RUNTIME_DIR/statecache/statecached.sock, "
          "else unix:/tmp/statecache-$UID/statecached.sock. A missing "
          "socket directory is created with mode 0700 (an existing one is "
          "left as it is: pre-create it with a group to share the socket) "
          "and the socket is made 0660. A "
          "TCP address (e.g. 127.0.0.1:50051; port 0 picks one) needs TLS "
          "(--tls_cert, --tls_key) or --insecure_tcp.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain for TLS on a TCP --listen (with --tls_key).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle: require every TLS client to present a certificate "
          "it signed (mutual TLS). The certificate's identity (first subject "
          "alternative name, else common name) is the client's principal, "
          "x509:NAME in --attach_allow and --admin_allow.");
ABSL_FLAG(bool, insecure_tcp, false,
          "Serve a TCP --listen in plaintext, without TLS: no encryption, no "
          "authentication (every peer is anonymous, and never an operator).");
ABSL_FLAG(std::string, attach_allow, "any",
          "Who may attach, comma-separated: uid:N, user:NAME, gid:N, "
          "group:NAME (a Unix-socket peer's uid or primary gid, from the "
          "kernel), x509:NAME (a verified client certificate), any.");
ABSL_FLAG(std::string, admin_allow, "",
          "Who may make the operator calls (ListSessions, EvictSession, "
          "Resize, Drain), in --attach_allow's forms but not any. Default: "
          "root and the daemon's own user. GetStats is open to all.");
ABSL_FLAG(int32_t, max_streams_per_connection, 100,
          "Calls one client connection may have open at once (each "
          "StepStream holds one for its life); more wait in the client "
          "until one ends.");
ABSL_FLAG(int32_t, max_connections, 0,
          "Client connections open at once; one past it is closed on "
          "arrival. 0 = half the file-descriptor limit (RLIMIT_NOFILE), at "
          "most 1024.");
ABSL_FLAG(int64_t, handshake_timeout_ms, 10000,
          "A new connection that has not sent the HTTP/2 preface (or, over "
          "TLS, completed its handshake) within this many milliseconds is "
          "closed. Until then it counts against --max_connections, and at "
          "the cap the oldest such connection makes way for a new one. "
          "10 to 600000.");
ABSL_FLAG(int64_t, max_resets_per_second, 1000,
          "HTTP/2 streams a second one connection may open and abandon "
          "(reset or cancel before the reply) before the daemon closes it: "
          "the rapid-reset defence (CVE-2023-44487), which Debian's gRPC "
          "lacks. 0 = no limit.");
ABSL_FLAG(int64_t, num_slots, 1024, "Slots in the pool at start.");
ABSL_FLAG(int64_t, max_slots, 0,
          "Largest pool a Resize may ask for; 0 = as many slots as this "
          "machine's memory holds the pool's bookkeeping for (at most "
          "2^30). A --num_slots or --max_slots whose bookkeeping alone "
          "exceeds the machine's memory exits 2.");
ABSL_FLAG(std::string, transfer, "fork",
          "How state crosses a checkpoint: fork, none or replay.");
ABSL_FLAG(int64_t, fork_tokens, 1,
          "Committed tokens a fork destination needs (fork only).");
ABSL_FLAG(bool, readable_midstep, true,
          "Whether checkpoints may sit inside a forward (reserve/publish). "
          "Ignored (false) for --transfer=none.");
ABSL_FLAG(int64_t, hash_block_size, 64,
          "Tokens per hash block of the engines' prefix cache; clients must "
          "match.");
ABSL_FLAG(std::string, model_id, "", "Model identity clients must match.");
ABSL_FLAG(std::string, hash_namespace, "",
          "Block-hash namespace clients must match.");
ABSL_FLAG(int32_t, num_spec, 0,
          "Speculative tokens per step clients must match (slot sets are "
          "1 + num_spec wide).");
ABSL_FLAG(absl::Duration, lease_ttl, absl::Seconds(10),
          "A session not heard from for this long is expired.");
ABSL_FLAG(int32_t, max_ops_per_step, 4096, "Operations one Step may carry.");
ABSL_FLAG(int64_t, max_hashes_per_step, 65536,
          "Hashes one Step may carry over all its operations (block hashes, "
          "reservation positions, unindexed hashes): bounds how long one "
          "session's Step can delay another's.");
ABSL_FLAG(int64_t, host_tier_bytes, 0,
          "Host memory (bytes) for checkpoints the pool evicts, resumed from "
          "when a prefix goes deeper there than on the device; 0 = off. "
          "Needs state memory (--model or --layout). Resize changes it.");
ABSL_FLAG(std::string, state_dir, "",
          "Directory where the daemon keeps what it needs to restart warm: "
          "the checkpoint index with a checksum of every checkpoint, and "
          "(host backend) a state region that outlives the process. A daemon "
          "started on the same directory with the same identity, transfer "
          "and layout comes back with the checkpoints whose bytes still "
          "match; anything else starts empty, saying why. Needs state "
          "memory. Empty = off.");
ABSL_FLAG(absl::Duration, state_save_interval, absl::Milliseconds(100),
          "With --state_dir: how often the checkpoint index is saved (when "
          "it changed). A crash loses what was published since, and any "
          "checkpoint whose slot was reused since: under heavy load a pool "
          "turns over in well under a second.");
ABSL_FLAG(bool, fair_share, true,
          "Steps take turns round robin between sessions, so one session's "
          "many Steps in flight cannot all go before another's.");
ABSL_FLAG(int32_t, operation_timing_interval, 16,
          "For statecache_step_operation_duration_seconds: time about one "
          "Step operation in this many, at random (a clock read costs about "
          "what a cheap operation does); 1 times every one. "
          "statecache_step_operations_total counts them all.");
ABSL_FLAG(int64_t, max_slots_per_session, 0,
          "Slots one session may keep from the others at once (its "
          "requests' slots and midstep reservations, and the fork sources "
          "its pin clock holds); an admit, reserve or checkpoint past it is "
          "refused RESOURCE_EXHAUSTED. 0 = no quota.");
ABSL_FLAG(std::string, quarantine, "lease_ttl",
          "How long the slots of a session whose lease lapsed, or that an "
          "operator evicted, are fenced before anyone else gets them (its "
          "hung engine's forward may still be writing them): a duration "
          "(\"30s\"), or \"lease_ttl\" for one lease TTL. 0 releases them at "
          "once.");
ABSL_FLAG(int32_t, max_sessions, 1024,
          "Sessions attached at once; an Attach past it is refused "
          "RESOURCE_EXHAUSTED. 0 = no cap.");
ABSL_FLAG(int64_t, max_message_bytes, int64_t{16} << 20,
          "Largest gRPC message received or sent.");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(2),
          "On SIGTERM/SIGINT, the longest to wait for calls in progress (a "
          "Step being served on a stream, a Resize) before cancelling them; "
          "idle connections do not hold up the exit.");
ABSL_FLAG(int, ready_fd, -1,
          "If >= 0, write \"ready\\n\" to this fd once serving, then close "
          "it.");
ABSL_FLAG(int, v, 0, "Log verbosity: 0 = events, 1 = also one line per RPC.");
ABSL_FLAG(
    std::string, model, "",
    "State layout preset (e.g. qwen3-next-80b-a3b, nemotron-h-8b, "
    "jamba-v0.1, or a Hugging Face repo id of one). With neither --model "
    "nor --layout the daemon keeps no state memory: slot decisions only.");
ABSL_FLAG(std::string, layout, "",
          "State layout file (JSON; see docs/layout.md). Overrides --model. "
          "Its \"arrangement\" stands unless --layer_major is given.");
ABSL_FLAG(bool, layer_major, false,
          "Arrange the region [layer][tensor][slot] (as ATOM and vLLM "
          "allocate it) instead of slot-major (one slot = one contiguous "
          "range: cheap copies, shrinks from the tail). Layer-major regions "
          "are laid out once for --max_slots. With --layout, replaces the "
          "file's arrangement.");
ABSL_FLAG(std::string, device_backend, "host",
          "Where the state lives: host (POSIX shared memory), or hip / cuda "
          "/ gpu when built with a GPU flavour. GPU regions are reserved for "
          "--max_slots at start and cannot grow past it.");
ABSL_FLAG(int, device, 0, "GPU ordinal for the hip/cuda backends.");
ABSL_FLAG(std::string, shm_mode, "",
          "Mode of the host backend's shared-memory object (octal). Default: "
          "as the socket's door: 0660 when the socket directory lets its "
          "group in (g+x) or the address is not a Unix socket, else 0600. "
          "Engines map the state through its group.");
ABSL_FLAG(std::string, shm_group, "",
          "Group (name or number) of the host backend's shared-memory "
          "object. Default: the socket directory's group, so that engines "
          "in the group the socket is shared with can map the state.");
ABSL_FLAG(int, copy_threads, 4, "Host backend: threads of the copy engine.");
ABSL_FLAG(std::string, metrics_address, "127.0.0.1:9400",
          "host:port serving Prometheus metrics at /metrics (port 0 picks "
          "one and logs it); empty disables. Loopback by default: the "
          "metrics carry no secrets, but say how busy the GPU is.");

namespace statecache {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitServeError = 1;
constexpr int kExitConfigError = 2;

// The longest the maintenance thread sleeps: bounds how late it notices a
// deadline that appeared while it slept (a new resize with a short deadline).
constexpr absl::Duration kMaxMaintenanceSleep = absl::Milliseconds(100);
// The shortest: if the core keeps reporting a deadline in the past, the
// thread must not spin.
constexpr absl::Duration kMinMaintenanceSleep = absl::Milliseconds(1);

// ------------------------------------------------------------ configuration

// Bytes of memory this machine has (0 when it cannot say).
uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0
             ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page)
             : 0;
}

// The pool's bookkeeping grows with its slots: a size this machine cannot
// hold is refused here, naming the flag, rather than dying of bad_alloc at
// start (or, for --max_slots, at a later Resize).
absl::Status CheckPoolFits(const char* flag, int64_t slots, uint64_t memory) {
  if (slots < 1 || slots > kMaxSlots || memory == 0) return absl::OkStatus();
  const uint64_t needs = SlotMemory::BookkeepingBytes(slots);
  if (needs <= memory) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s=%d needs about %.1f GiB for the pool's bookkeeping alone, more "
      "than this machine's %.1f GiB of memory: lower it",
      flag, slots, static_cast<double>(needs) / (1 << 30),
      static_cast<double>(memory) / (1 << 30)));
}

// Who may map the host backend's region, and whose successor may reclaim
// it (see shm_name.h).
struct RegionAccess {
  mode_t mode = 0660;
  gid_t group = static_cast<gid_t>(-1);
  uint64_t keeper = 0;
};

// Whether the daemon's user is in group `gid` (so may give a file to it).
bool InGroup(gid_t gid) {
  const int count = ::getgroups(0, nullptr);
  if (count <= 0) return false;
  std::vector<gid_t> groups(static_cast<size_t>(count));
  const int got = ::getgroups(count, groups.data());
  return got > 0 && std::find(groups.begin(), groups.begin() + got, gid) !=
                        groups.begin() + got;
}

// --shm_mode and --shm_group, each defaulting to what the socket's
// directory says: engines reach the socket through its group, so the same
// group must be able to map the state, and no one else.
absl::StatusOr<RegionAccess> RegionAccessFromFlags(
    const std::string& listen, const std::optional<std::string>& socket_path) {
  RegionAccess access;
  access.keeper = ShmKeeperKey(listen);
  struct stat dir {};
  bool have_dir = false;
  if (socket_path.has_value()) {
    const std::string::size_type slash = socket_path->rfind('/');
    const std::string path = slash == std::string::npos ? "."
                             : slash == 0               ? "/"
                                          : socket_path->substr(0, slash);
    have_dir = ::stat(path.c_str(), &dir) == 0;
  }
  if (const std::string mode = absl::GetFlag(FLAGS_shm_mode); !mode.empty()) {
    unsigned parsed = 0;
    char trailing = 0;
    if (std::sscanf(mode.c_str(), "%o%c", &parsed, &trailing) != 1 ||
        parsed > 0777) {
      return absl::InvalidArgumentError("--shm_mode must be octal, e.g. 0660");
    }
    access.mode = static_cast<mode_t>(parsed);
  } else if (have_dir) {
    access.mode = (dir.st_mode & S_IXGRP) != 0 ? 0660 : 0600;
  }
  if (const std::string group = absl::GetFlag(FLAGS_shm_group);
      !group.empty()) {
    uint32_t gid = 0;
    if (absl::SimpleAtoi(group, &gid)) {
      access.group = static_cast<gid_t>(gid);
    } else if (const struct group* entry = ::getgrnam(group.c_str())) {
      access.group = entry->gr_gid;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--shm_group: no group named \"", group, "\""));
    }
  } else if (have_dir && dir.st_gid != ::getegid()) {
    if (::geteuid() == 0 || InGroup(dir.st_gid)) {
      access.group = dir.st_gid;
    } else {
      LOG_WARNING(
          "the socket directory's group (gid %d) is not this daemon's: the "
          "state region keeps the daemon's own group (--shm_group to choose)",
          dir.st_gid);
    }
  }
  return access;
}

// One flag-to-option mapping, read top to bottom; it runs a little over the
// usual length because each flag's check sits beside its use.
absl::StatusOr<StateCacheOptions> OptionsFromFlags(const RegionAccess& access) {
  StateCacheOptions options;
  options.identity.set_model_id(absl::GetFlag(FLAGS_model_id));
  options.identity.set_hash_block_size(absl::GetFlag(FLAGS_hash_block_size));
  options.identity.set_hash_namespace(absl::GetFlag(FLAGS_hash_namespace));
  options.identity.set_num_spec(absl::GetFlag(FLAGS_num_spec));
  if (options.identity.num_spec() < 0) {
    return absl::InvalidArgumentError("--num_spec must be >= 0");
  }
  options.num_slots = absl::GetFlag(FLAGS_num_slots);
  int64_t max_slots = absl::GetFlag(FLAGS_max_slots);
  if (max_slots < 0) {
    return absl::InvalidArgumentError("--max_slots must be >= 0");
  }
  const uint64_t memory = PhysicalMemoryBytes();
  RETURN_IF_ERROR(CheckPoolFits("--num_slots", options.num_slots, memory));
  RETURN_IF_ERROR(CheckPoolFits("--max_slots", max_slots, memory));
  // Unset: as many as the bookkeeping fits in memory for.
  options.max_slots =
      max_slots != 0 ? max_slots
      : memory == 0
          ? kMaxSlots
          : std::min<int64_t>(
                kMaxSlots,
                static_cast<int64_t>(memory / SlotMemory::BookkeepingBytes(1)));

  absl::StatusOr<TransferKind> kind =
      ParseTransferKind(absl::GetFlag(FLAGS_transfer));
  if (!kind.ok()) return kind.status();
  int64_t fork_tokens = absl::GetFlag(FLAGS_fork_tokens);
  bool readable_midstep = absl::GetFlag(FLAGS_readable_midstep);
  // The defaults describe fork; "none" carries nothing across, so its
  // fork_tokens and readable_midstep are forced rather than refused.
  if (*kind == TransferKind::kNone) {
    fork_tokens = 0;
    readable_midstep = false;
  } else if (*kind != TransferKind::kFork) {
    fork_tokens = 0;
  }
  absl::StatusOr<StateTransfer> transfer =
      StateTransfer::Create(*kind, fork_tokens, readable_midstep);
  if (!transfer.ok()) return transfer.status();
  options.transfer = *transfer;

  options.lease_ttl = absl::GetFlag(FLAGS_lease_ttl);
  if (options.lease_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--lease_ttl must be positive");
  }
  std::string admin_allow = absl::GetFlag(FLAGS_admin_allow);
  if (admin_allow.empty()) {
    admin_allow = ::geteuid() == 0 ? std::string("uid:0")
                                   : absl::StrCat("uid:0,uid:", ::geteuid());
  }
  ASSIGN_OR_RETURN(
      options.access,
      AccessPolicy::Parse(absl::GetFlag(FLAGS_attach_allow), admin_allow));
  const std::string quarantine = absl::GetFlag(FLAGS_quarantine);
  if (quarantine == "lease_ttl") {
    options.quarantine = options.lease_ttl;
  } else if (!absl::ParseDuration(quarantine, &options.quarantine) ||
             options.quarantine < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--quarantine must be a duration >= 0 or \"lease_ttl\", got \"",
        quarantine, "\""));
  }
  options.max_slots_per_session = absl::GetFlag(FLAGS_max_slots_per_session);
  options.max_sessions = absl::GetFlag(FLAGS_max_sessions);
  if (options.max_slots_per_session < 0 || options.max_sessions < 0) {
    return absl::InvalidArgumentError(
        "--max_slots_per_session and --max_sessions must be >= 0 (0: none)");
  }
  options.max_operations_per_step = absl::GetFlag(FLAGS_max_ops_per_step);
  options.max_hashes_per_step = absl::GetFlag(FLAGS_max_hashes_per_step);
  options.fair_share = absl::GetFlag(FLAGS_fair_share);
  options.operation_timing_interval =
      absl::GetFlag(FLAGS_operation_timing_interval);
  if (options.operation_timing_interval < 1) {
    return absl::InvalidArgumentError(
        "--operation_timing_interval must be >= 1 (1: every operation)");
  }
  if (options.max_operations_per_step < 1) {
    return absl::InvalidArgumentError("--max_ops_per_step must be >= 1");
  }
  // The state memory, when a layout is given. Its shm name carries the
  // epoch, so the epoch is chosen here rather than by StateCache.
  const std::string layout_file = absl::GetFlag(FLAGS_layout);
  const std::string model = absl::GetFlag(FLAGS_model);
  if (!layout_file.empty() || !model.empty()) {
    const Arrangement arrangement = absl::GetFlag(FLAGS_layer_major)
                                        ? Arrangement::kLayerMajor
                                        : Arrangement::kSlotMajor;
    absl::StatusOr<StateLayout> layout =
        layout_file.empty()
            ? LayoutPreset(model, options.identity.num_spec(), arrangement)
            : LoadLayoutFile(layout_file);
    if (!layout.ok()) return layout.status();
    // A file's own "arrangement" stands unless --layer_major asks for
    // layer-major: the flag used to replace it either way, so a file saying
    // layer_major silently came up slot-major.
    if (!layout_file.empty() && arrangement == Arrangement::kLayerMajor) {
      *layout = layout->WithArrangement(arrangement);
    }
    options.epoch = NewEpoch(absl::Now());
    DeviceOptions device;
    device.backend = absl::GetFlag(FLAGS_device_backend);
    device.layout = *std::move(layout);
    device.num_slots = options.num_slots;
    device.max_slots = max_slots;
    device.epoch = options.epoch;
    device.device = absl::GetFlag(FLAGS_device);
    device.copy_threads = absl::GetFlag(FLAGS_copy_threads);
    device.shm_mode = access.mode;
    device.shm_group = access.group;
    // A warm restart reads the checkpoints out of the region it left.
    device.retain_region =
        !absl::GetFlag(FLAGS_state_dir).empty() && device.backend == "host";
    device.shm_keeper = access.keeper;
    if (device.backend == "host") {
      absl::StatusOr<std::vector<std::string>> removed =
          HostDevice::CleanupStale(device.shm_prefix);
      if (removed.ok()) {
        for (const std::string& name : *removed) {
          LOG_INFO("removed stale shared-memory object %s (its daemon died)",
                   name);
        }
      }
    }
    absl::StatusOr<std::unique_ptr<Device>> created = CreateDevice(device);
    if (!created.ok()) {
      // Most often the memory is not there: say how much was asked for.
      return absl::Status(
          created.status().code(),
          absl::StrCat("cannot create the state memory (", device.backend,
                       " backend, ", device.num_slots, " slots of ",
                       device.layout.bytes_per_slot(), " bytes, ",
                       device.layout.RegionBytes(device.num_slots),
                       " bytes in all): ", created.status().message(),
                       "; lower --num_slots or free memory"));
    }
    options.device = std::shared_ptr<Device>(std::move(*created));
  }
  const int64_t tier_bytes = absl::GetFlag(FLAGS_host_tier_bytes);
  if (tier_bytes < 0 || (tier_bytes > 0 && options.device == nullptr)) {
    return absl::InvalidArgumentError(
        "--host_tier_bytes must be >= 0, and needs state memory (--model or "
        "--layout)");
  }
  options.host_tier_bytes = static_cast<uint64_t>(tier_bytes);
  if (!absl::GetFlag(FLAGS_state_dir).empty() && options.device == nullptr) {
    return absl::InvalidArgumentError(
        "--state_dir needs state memory (--model or --layout)");
  }
  if (absl::GetFlag(FLAGS_state_save_interval) <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--state_save_interval must be positive");
  }
  return options;
}

// ------------------------------------------------------------ maintenance

// Runs StateCache::Tick whenever the core has something due (a lease lapsing,
// a resize to retry or expire), and saves the state directory's index every
// `save_interval` (with a keeper), sleeping in between; Stop wakes it at
// once.
//
// Thread safety: Stop may be called from any thread.
class MaintenanceThread {
 public:
  // None is owned; `keeper` may be null. REQUIRES: all outlive this.
  MaintenanceThread(StateCache* cache, SessionEventLog* events,
                    StateKeeper* keeper, absl::Duration save_interval)
      : cache_(cache),
        events_(events),
        keeper_(keeper),
        save_interval_(save_interval),
        thread_([this] { Run(); }) {}
  ~MaintenanceThread() { Stop(); }

  MaintenanceThread(const MaintenanceThread&) = delete;
  MaintenanceThread& operator=(const MaintenanceThread&) = delete;

  // Wakes the thread and joins it. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::Time next_save = absl::Now() + save_interval_;
    for (;;) {
      cache_->Tick();
      events_->LogExpiries();
      absl::Time now = absl::Now();
      if (keeper_ != nullptr && now >= next_save) {
        if (absl::Status st = keeper_->Save(); !st.ok()) {
          LOG_WARNING("state dir: saving the index failed: %s", st.ToString());
        }
        now = absl::Now();
        next_save = now + save_interval_;
      }
      absl::Time wake =
          std::clamp(cache_->NextDeadline(), now + kMinMaintenanceSleep,
                     now + kMaxMaintenanceSleep);
      if (keeper_ != nullptr) wake = std::min(wake, next_save);
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithDeadline(absl::Condition(&stopping_), wake)) return;
    }
  }

  StateCache* const cache_;
  SessionEventLog* const events_;
  StateKeeper* const keeper_;
  const absl::Duration save_interval_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the members above exist
};

// ------------------------------------------------------------ readiness

void SignalReady(int ready_fd) {
  if (ready_fd < 0) return;
  static constexpr char kReady[] = "ready\n";
  if (::write(ready_fd, kReady, sizeof(kReady) - 1) !=
      static_cast<ssize_t>(sizeof(kReady) - 1)) {
    LOG_WARNING("--ready_fd=%d: write failed: %s", ready_fd,
                std::strerror(errno));
  }
  ::close(ready_fd);
}

// Ignores SIGPIPE and blocks SIGTERM and SIGINT, returning them as the set
// to sigwait on. Called before any thread exists, so every thread (gRPC's
// included) inherits the mask.
sigset_t BlockStopSignals() {
  // A reader that went away (--ready_fd, a piped stderr) must not kill the
  // daemon; the failed write is reported instead.
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  return stop_signals;
}

void LogStateMemory(const Device* device) {
  if (device == nullptr) {
    LOG_INFO("no --model or --layout: slot decisions only, no state memory");
    return;
  }
  const std::string backend(device->backend());
  const RegionExport region = device->Export();
  LOG_INFO(
      "state memory: backend=%s layout=%s (%s) %d bytes/slot, %d bytes "
      "committed, handle=%s",
      backend, device->layout().name(), region.layout_fingerprint,
      device->layout().bytes_per_slot(), device->CommittedBytes(),
      backend == "host" ? region.handle : std::string("<ipc>"));
}

// Serves /metrics on `address` and has `metrics` observe the cache.
absl::Status StartMetrics(Metrics& metrics, StateCache& cache,
                          const Device* device, const std::string& address) {
  RETURN_IF_ERROR(metrics.Serve(address));
  cache.AddObserver(&metrics);
  if (device != nullptr) {
    metrics.OnStateBytes(static_cast<int64_t>(device->CommittedBytes()));
  }
  const std::vector<int> ports = metrics.ListeningPorts();
  const int port = ports.empty() ? 0 : ports[0];
  // The bound port, so ":0" reads as the real address.
  const std::string host = address.substr(0, address.rfind(':'));
  LOG_INFO("metrics on http://%s:%d/metrics (port %d)", host, port, port);
  return absl::OkStatus();
}

// The stop signal that arrived (blocked by BlockStopSignals).
int WaitForSignal(const sigset_t& signals) {
  int signal_number = 0;
  while (sigwait(&signals, &signal_number) != 0) {
  }
  return signal_number;
}

// The serving flags; the connection cap defaults to half the descriptor
// limit, leaving the rest for the state memory, metrics and gRPC itself.
ServingOptions ServingOptionsFromFlags(std::string listen) {
  int max_connections = absl::GetFlag(FLAGS_max_connections);
  if (max_connections <= 0) {
    rlimit limit{};
    const rlim_t soft =
        ::getrlimit(RLIMIT_NOFILE, &limit) == 0 ? limit.rlim_cur : 1024;
    max_connections = static_cast<int>(std::clamp<rlim_t>(soft / 2, 1, 1024));
  }
  return ServingOptions{
      .listen = std::move(listen),
      .max_message_bytes = static_cast<int>(std::clamp<int64_t>(
          absl::GetFlag(FLAGS_max_message_bytes), 1024, INT32_MAX)),
      .max_connections = max_connections,
      .max_streams_per_connection =
          std::max(1, absl::GetFlag(FLAGS_max_streams_per_connection)),
      .handshake_timeout_ms = absl::GetFlag(FLAGS_handshake_timeout_ms),
      .max_resets_per_second = absl::GetFlag(FLAGS_max_resets_per_second),
      .tls_cert = absl::GetFlag(FLAGS_tls_cert),
      .tls_key = absl::GetFlag(FLAGS_tls_key),
      .tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca),
      .insecure_tcp = absl::GetFlag(FLAGS_insecure_tcp),
  };
}

// Removes the regions this daemon's predecessors kept for a warm restart
// that nothing will restore from (a SIGKILL during a shutdown save leaves
// them), sparing what an index still names. With or without --state_dir:
// they are this daemon's (the keeper key in their names says so) either way.
void ReclaimOrphanedRegions(uint64_t keeper_key, const StateKeeper* keeper) {
  const std::vector<std::string> spare =
      keeper != nullptr ? keeper->SparedRegions() : std::vector<std::string>{};
  absl::StatusOr<std::vector<std::string>> removed =
      ReclaimOrphanedRetainedShm(DeviceOptions{}.shm_prefix, keeper_key, spare);
  if (!removed.ok()) {
    LOG_WARNING("looking for orphaned regions: %s",
                removed.status().ToString());
    return;
  }
  for (const std::string& name : *removed) {
    LOG_INFO(
        "removed orphaned region %s (kept for a warm restart by a daemon on "
        "this address that died before its index named it)",
        name);
  }
}

// The daemon's life in order: configure, listen, serve until a signal,
// drain, stop. Each step is a named function above; what is left here is
// their order and the objects they share, which reads best in one place.
int Serve() {
  log::SetVerbosity(absl::GetFlag(FLAGS_v));

  // The socket's directory first: the region's access follows it.
  std::string listen = absl::GetFlag(FLAGS_listen);
  if (listen.empty()) listen = DefaultAddress();
  const std::optional<std::string> socket_path = UnixSocketPath(listen);
  if (absl::Status st = PrepareListenAddress(listen, socket_path); !st.ok()) {
    LOG_ERROR("cannot listen on %s: %s", listen, st.ToString());
    // A path the daemon must not trust is the operator's to fix.
    return absl::IsPermissionDenied(st) ? kExitConfigError : kExitServeError;
  }
  absl::StatusOr<RegionAccess> access =
      RegionAccessFromFlags(listen, socket_path);
  absl::StatusOr<StateCacheOptions> options =
      access.ok() ? OptionsFromFlags(*access) : access.status();
  if (!options.ok()) {
    LOG_ERROR("bad configuration: %s", options.status().ToString());
    return kExitConfigError;
  }
  // A directory another daemon holds, or one the daemon must not trust, is
  // a configuration error, found before anything is served.
  std::unique_ptr<StateDir> state_dir;
  if (const std::string dir = absl::GetFlag(FLAGS_state_dir); !dir.empty()) {
    absl::StatusOr<std::unique_ptr<StateDir>> opened = StateDir::Open(dir);
    if (!opened.ok()) {
      LOG_ERROR("bad configuration: %s", opened.status().ToString());
      return kExitConfigError;
    }
    state_dir = *std::move(opened);
  }
  const sigset_t stop_signals = BlockStopSignals();

  const std::string transfer_name = options->transfer.DebugString();
  std::shared_ptr<Device> device = options->device;
  const std::string backend_name =
      device ? std::string(device->backend()) : std::string("none");
  LogStateMemory(device.get());
  absl::StatusOr<std::unique_ptr<StateCache>> cache =
      StateCache::Create(*std::move(options));
  if (!cache.ok()) {
    LOG_ERROR("bad configuration: %s", cache.status().ToString());
    return kExitConfigError;
  }
  // Before serving: the checkpoints the last daemon left come back first.
  std::unique_ptr<StateKeeper> keeper;
  if (state_dir != nullptr) {
    keeper = std::make_unique<StateKeeper>(std::move(state_dir), cache->get(),
                                           DeviceOptions{}.shm_prefix);
    keeper->Restore();
    // The region is worth keeping now: the index names it.
    if (auto* host = dynamic_cast<HostDevice*>(device.get())) {
      host->KeepOnExit(true);
    }
  }
  ReclaimOrphanedRegions(access->keeper, keeper.get());
  SessionEventLog events;
  (*cache)->AddObserver(&events);
  Metrics metrics(cache->get(), Metrics::Options{.version = STATECACHE_VERSION,
                                                 .backend = backend_name,
                                                 .start_time = absl::Now()});
  const std::string metrics_address = absl::GetFlag(FLAGS_metrics_address);
  if (!metrics_address.empty()) {
    if (absl::Status st =
            StartMetrics(metrics, **cache, device.get(), metrics_address);
        !st.ok()) {
      LOG_ERROR("%s", st.ToString());
      return kExitServeError;
    }
  }
  RpcObserver* rpc_observer = metrics_address.empty() ? nullptr : &metrics;
  CallTracker calls;
  // The peers the doors let in, by connection (see connection_gate.h).
  PeerTable peers;
  StateCacheGrpcService scheduler_service(cache->get(), &events, rpc_observer,
                                          &calls, &peers);
  // Step messages live in one arena per call (see arena_allocator.h).
  ArenaMessageAllocator<v1::StepRequest, v1::StepResponse> step_allocator;
  scheduler_service.SetMessageAllocatorFor_Step(&step_allocator);
  StateCacheAdminGrpcService admin_service(cache->get(), &events, rpc_observer,
                                           &calls, &peers);

  const ServingOptions serving_options = ServingOptionsFromFlags(listen);
  absl::StatusOr<std::unique_ptr<Serving>> serving = Serving::Start(
      serving_options, {&scheduler_service, &admin_service}, &peers);
  if (!serving.ok()) {
    LOG_ERROR("cannot listen on %s: %s", listen, serving.status().ToString());
    return absl::IsInvalidArgument(serving.status()) ? kExitConfigError
                                                     : kExitServeError;
  }
  (*serving)->SetHealth(true);

  MaintenanceThread maintenance(cache->get(), &events, keeper.get(),
                                absl::GetFlag(FLAGS_state_save_interval));

  LOG_INFO(
      "pool: num_slots=%d transfer=%s lease_ttl=%s max_ops_per_step=%d "
      "host_tier_bytes=%d",
      absl::GetFlag(FLAGS_num_slots), transfer_name,
      absl::FormatDuration(absl::GetFlag(FLAGS_lease_ttl)),
      absl::GetFlag(FLAGS_max_ops_per_step),
      absl::GetFlag(FLAGS_host_tier_bytes));
  LOG_INFO("access: %s max_connections=%d", (*cache)->access().DebugString(),
           serving_options.max_connections);
  LOG_INFO("listening on %s epoch=%d", (*serving)->address(),
           (*cache)->epoch());
  SignalReady(absl::GetFlag(FLAGS_ready_fd));

  const int signal_number = WaitForSignal(stop_signals);
  LOG_INFO("%s: shutting down (grace %s)", strsignal(signal_number),
           absl::FormatDuration(absl::GetFlag(FLAGS_shutdown_grace)));

  (*cache)->SetDraining(true);
  (*serving)->SetHealth(false);
  (*serving)->Drain(calls, absl::GetFlag(FLAGS_shutdown_grace));
  maintenance.Stop();
  serving->reset();
  if (keeper != nullptr) {
    // No Step runs any more: what the next daemon restores is final.
    if (absl::Status st = keeper->SaveForShutdown(); !st.ok()) {
      LOG_ERROR(
          "state dir: saving at shutdown failed: %s (the next start "
          "has what was saved before)",
          st.ToString());
    } else if (auto* host = dynamic_cast<HostDevice*>(device.get())) {
      host->KeepOnExit(false);  // the images file holds its checkpoints
    }
    keeper.reset();
  }
  // Destroying the cache cancels a resize still pending in the core; the
  // last reference to the device unmaps and unlinks the state memory.
  cache->reset();
  device.reset();
  options->device.reset();
  LOG_INFO("stopped");
  // Everything with an effect outside the process is done. The rest (the
  // metrics HTTP server's and gRPC's own teardown) only frees memory and
  // threads, and takes seconds: skip it.
  std::fflush(stderr);
  std::_Exit(kExitOk);
}

}  // namespace

}  // namespace statecache

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "the recurrent-state cache daemon.\n"
      "Usage: statecached [--listen=ADDR] [--num_slots=N] [--transfer=KIND] "
      "[flags...]");
  // --help lists this file's flags (absl matches files named after the
  // program by default, and this one is main.cc), under the program's name
  // rather than the path of the tree it was built in.
  absl::FlagsUsageConfig usage_config;
  usage_config.normalize_filename = [](absl::string_view path) {
    return std::string(absl::EndsWith(path, "daemon/main.cc") ? "statecached"
                                                              : path);
  };
  usage_config.contains_help_flags = [](absl::string_view path) {
    return path == "statecached" || absl::EndsWith(path, "daemon/main.cc");
  };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  absl::SetFlagsUsageConfig(usage_config);
  // Abseil exits 1 on a flag it does not know or cannot parse; a bad
  // command line is a configuration error here (exit 2), like every other.
  if (std::optional<std::string> bad = statecache::BadFlag(argc, argv)) {
    statecache::log::Write('E', *bad);
    return statecache::kExitConfigError;
  }
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    statecache::log::Write(
        'E', absl::StrCat("unexpected argument: ", positional[1]));
    return statecache::kExitConfigError;
  }
  return statecache::Serve();
}
