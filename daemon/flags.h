// The daemon's command-line flags and what they become.
//
// The flags are defined in flags.cc (where --help finds their descriptions,
// listed under the program's name: see main.cc); what the daemon's wiring
// reads directly is declared below. Each *FromFlags checks its flags and
// refuses a bad value with INVALID_ARGUMENT naming the flag (main.cc exits
// 2 on it), before anything is built from them.
//
// Thread-compatible: called from main's thread, after the flags are parsed.
#ifndef STATECACHE_DAEMON_FLAGS_H_
#define STATECACHE_DAEMON_FLAGS_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/channel/step_channels.h"
#include "daemon/service/state_cache.h"
#include "daemon/serving.h"

ABSL_DECLARE_FLAG(std::string, listen);
ABSL_DECLARE_FLAG(std::string, state_dir);
ABSL_DECLARE_FLAG(absl::Duration, state_save_interval);
ABSL_DECLARE_FLAG(absl::Duration, shutdown_grace);
ABSL_DECLARE_FLAG(std::string, metrics_address);
ABSL_DECLARE_FLAG(int, ready_fd);
ABSL_DECLARE_FLAG(int, v);
// For the start's log line.
ABSL_DECLARE_FLAG(int64_t, num_slots);
ABSL_DECLARE_FLAG(absl::Duration, lease_ttl);
ABSL_DECLARE_FLAG(int32_t, max_ops_per_step);
ABSL_DECLARE_FLAG(int64_t, host_tier_bytes);

namespace statecache {

// Who may map the host backend's region, and whose successor may reclaim
// it (see shm_name.h).
struct RegionAccess {
  mode_t mode = 0660;
  gid_t group = static_cast<gid_t>(-1);
  uint64_t keeper = 0;
};

// --shm_mode and --shm_group, each defaulting to what the socket's
// directory (of `socket_path`, for the address `listen`) says; the keeper
// key from `listen`. Errors: INVALID_ARGUMENT a mode that is not octal, a
// group that does not exist.
absl::StatusOr<RegionAccess> RegionAccessFromFlags(
    const std::string& listen, const std::optional<std::string>& socket_path);

// The cache's options, its state memory created (host regions with
// `access`). Errors: INVALID_ARGUMENT naming the flag at fault (a size this
// machine cannot hold, an unknown transfer or model, flags that contradict
// each other); the state memory's own when it cannot be created.
absl::StatusOr<StateCacheOptions> OptionsFromFlags(const RegionAccess& access);

// The server's options for `listen` (its range checks are Serving::Start's).
ServingOptions ServingOptionsFromFlags(std::string listen);

// The step channels' options (range checks: StepChannels::ValidateOptions),
// their objects made with `access`.
StepChannelOptions StepChannelOptionsFromFlags(const RegionAccess& access);

}  // namespace statecache

#endif  // STATECACHE_DAEMON_FLAGS_H_
