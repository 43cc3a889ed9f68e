// The state memory an Attach returns (proto StateMemory), as the typed
// description the device layer uses: a RegionExport, whose layout computes
// every placement again from the tensors, so a client checks the daemon's
// placements instead of trusting them. Open a host region with
// HostRegion::Open(export) (daemon/device/host_region.h).
#ifndef STATECACHE_CLIENT_STATE_MEMORY_H_
#define STATECACHE_CLIENT_STATE_MEMORY_H_

#include <string>

#include "absl/status/statusor.h"
#include "vocabulary/region_export.h"

namespace statecache {

// `serialized` is a serialized statecache.v1.StateMemory message.
// Errors: INVALID_ARGUMENT when it does not parse, its layout is invalid,
// or its fingerprint or placements disagree with the layout they describe.
absl::StatusOr<RegionExport> RegionFromStateMemory(
    const std::string& serialized);

}  // namespace statecache

#endif  // STATECACHE_CLIENT_STATE_MEMORY_H_
