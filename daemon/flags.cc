#include "daemon/flags.h"

#include <grp.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "daemon/common/status_macros.h"
#include "daemon/core/slot_memory.h"
#include "daemon/core/state_transfer.h"
#include "daemon/device/device.h"
#include "daemon/device/host_device.h"
#include "daemon/device/layout_file.h"
#include "daemon/device/layout_presets.h"
#include "daemon/device/shm_name.h"
#include "daemon/listen_address.h"
#include "daemon/service/log.h"

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
ABSL_FLAG(bool, advise_placement, true,
          "Give placement advice to sessions that attach asking for it "
          "(AttachRequest.advise_placement): where each request's "
          "checkpoints go (a branch point another recent prompt shares, the "
          "continuation through its reply). Off: such sessions get none, "
          "and every decision is the reference pool's.");
ABSL_FLAG(int64_t, branch_point_blocks, int64_t{1} << 20,
          "Distinct prompt blocks (hashes) the branch-point table of placement "
          "advice remembers, about 40 bytes each; what no advised prompt "
          "used for that long is forgotten. At least 2.");
ABSL_FLAG(int64_t, advice_ladder_blocks, 16,
          "Placement advice: while the pool has vacant slots to spare, also "
          "advise a checkpoint (a guess, spent first) every this many blocks "
          "of each prefill. 0: never.");
ABSL_FLAG(std::string, eviction, "lru",
          "Which checkpoint a shortage spends once no slot is vacant: lru "
          "(the reference pool's rule: guesses first, then the least "
          "recently used) or second-chance (as lru, but a checkpoint resumed "
          "from since it was filed is passed over once: shared prefixes "
          "outlive checkpoints nothing read).");
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

ABSL_FLAG(int32_t, max_step_channels, 64,
          "Step channels (OpenStepChannel: Steps through shared memory for "
          "schedulers on this host's Unix socket) open at once; 0 turns "
          "them off. 0 to 4096.");
ABSL_FLAG(int64_t, step_channel_area_bytes, int64_t{4} << 20,
          "Capacity of each step channel's request and reply areas (bytes, "
          "a multiple of 8, 4096 to 1 GiB). A larger request goes over gRPC; "
          "a larger reply is sent in parts.");
ABSL_FLAG(absl::Duration, step_channel_spin, absl::Microseconds(50),
          "How long a step channel's thread polls for the next request "
          "after a reply before it sleeps (0 to 10ms): a scheduler's next "
          "pass often comes sooner than a wake-up would.");
ABSL_FLAG(absl::Duration, step_channel_expect_spin, absl::Microseconds(500),
          "How long a step channel's thread polls for a pass its client "
          "announced it is building (0 to 100ms): the pass then finds the "
          "thread awake however long it took to build.");

namespace statecache {
namespace {

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

// Whether the daemon's user is in group `gid` (so may give a file to it).
bool InGroup(gid_t gid) {
  const int count = ::getgroups(0, nullptr);
  if (count <= 0) return false;
  std::vector<gid_t> groups(static_cast<size_t>(count));
  const int got = ::getgroups(count, groups.data());
  return got > 0 && std::find(groups.begin(), groups.begin() + got, gid) !=
                        groups.begin() + got;
}

}  // namespace

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
    have_dir = ::stat(SocketDirectory(*socket_path).c_str(), &dir) == 0;
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
  options.advise_placement = absl::GetFlag(FLAGS_advise_placement);
  options.branch_point_blocks = absl::GetFlag(FLAGS_branch_point_blocks);
  options.advice_ladder_blocks = absl::GetFlag(FLAGS_advice_ladder_blocks);
  absl::StatusOr<Eviction> eviction =
      ParseEviction(absl::GetFlag(FLAGS_eviction));
  if (!eviction.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", eviction.status().message()));
  }
  options.eviction = *eviction;
  options.max_operations_per_step = absl::GetFlag(FLAGS_max_ops_per_step);
  options.max_hashes_per_step = absl::GetFlag(FLAGS_max_hashes_per_step);
  options.fair_share = absl::GetFlag(FLAGS_fair_share);
  options.operation_timing_interval =
      absl::GetFlag(FLAGS_operation_timing_interval);
  // StateCache::Create checks the rest; asked now, before the state memory
  // is allocated.
  RETURN_IF_ERROR(StateCache::ValidateOptions(options));
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

// The step channels' flags; the objects take the state memory's mode and
// group (`access`): the same engines reach both through the socket's group.
StepChannelOptions StepChannelOptionsFromFlags(const RegionAccess& access) {
  StepChannelOptions options;
  options.max_channels = absl::GetFlag(FLAGS_max_step_channels);
  const int64_t area = absl::GetFlag(FLAGS_step_channel_area_bytes);
  options.request_area_bytes = options.reply_area_bytes =
      area < 0 ? 0 : static_cast<size_t>(area);
  options.spin = absl::GetFlag(FLAGS_step_channel_spin);
  options.expect_spin = absl::GetFlag(FLAGS_step_channel_expect_spin);
  options.mode = access.mode;
  options.group = access.group;
  return options;
}

}  // namespace statecache
