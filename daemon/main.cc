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
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/command_line.h"
#include "daemon/common/status_macros.h"
#include "daemon/device/device.h"
#include "daemon/device/host_device.h"
#include "daemon/device/shm_name.h"
#include "daemon/flags.h"
#include "daemon/grpc/arena_allocator.h"
#include "daemon/grpc/call_tracker.h"
#include "daemon/grpc/grpc_service.h"
#include "daemon/grpc/session_event_log.h"
#include "daemon/listen_address.h"
#include "daemon/maintenance_thread.h"
#include "daemon/metrics/metrics.h"
#include "daemon/service/log.h"
#include "daemon/service/state_cache.h"
#include "daemon/service/state_dir.h"
#include "daemon/service/state_keeper.h"
#include "daemon/serving.h"
#include "vocabulary/default_address.h"

namespace statecache {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitServeError = 1;
constexpr int kExitConfigError = 2;

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
  const StepChannelOptions channel_options =
      StepChannelOptionsFromFlags(*access);
  if (absl::Status st = StepChannels::ValidateOptions(channel_options);
      !st.ok()) {
    LOG_ERROR("bad configuration: %s", st.ToString());
    return kExitConfigError;
  }
  if (absl::Status st = StepChannels::CleanupStale(channel_options.shm_prefix);
      !st.ok()) {
    LOG_WARNING("step channels: %s", st.ToString());
  }
  StepChannels channels(cache->get(), channel_options, rpc_observer);
  StateCacheGrpcService scheduler_service(cache->get(), &events, rpc_observer,
                                          &calls, &peers);
  scheduler_service.SetStepChannels(&channels);
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
  // The channels' Steps end with gRPC's: their clients see `closed`.
  channels.CloseAll();
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
  // --help lists the daemon's flags (absl matches files named after the
  // program by default; these are defined in flags.cc), under the
  // program's name rather than the path of the tree it was built in.
  absl::FlagsUsageConfig usage_config;
  usage_config.normalize_filename = [](absl::string_view path) {
    return std::string(absl::EndsWith(path, "daemon/flags.cc") ? "statecached"
                                                               : path);
  };
  usage_config.contains_help_flags = [](absl::string_view path) {
    return path == "statecached" || absl::EndsWith(path, "daemon/flags.cc");
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
