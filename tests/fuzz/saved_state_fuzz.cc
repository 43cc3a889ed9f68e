// libFuzzer target: DecodeSavedState (daemon/core/saved_state.h) on
// arbitrary bytes. It never crashes, and whatever it accepts re-encodes to
// bytes that decode to the same value (and, the encoding being canonical,
// to the very bytes it accepted). Every location an accepted index names
// then goes through ImageOffset, as a restart's does, against the images
// its own numbers promise (region_bytes, and a file of one image per
// record): an accepted location lies wholly inside, at exactly its own
// place (no wrap, no alias of another image).
//
// The region handle an accepted index names is what a restart hands to
// RetainedRegion::Open: if it is a retained name, it names one object
// directly under /dev/shm (nothing but the leading '/' is a separator),
// and the owner and keeper it records format back to a name that parses
// to them.
//
// The first byte picks the mode: even, the rest is decoded as it is; odd,
// the rest has its last 8 bytes replaced by the checksum of the bytes before
// them, so the fuzzer reaches the parser behind the checksum instead of
// spending itself on the checksum alone.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/common/checksum.h"
#include "daemon/core/saved_state.h"
#include "daemon/device/shm_name.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "saved_state_fuzz: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace statecache;
  if (size == 0) return 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) != 0 && bytes.size() >= 8) {
    const size_t body = bytes.size() - 8;
    const uint64_t sum = Checksum(bytes.data(), body);
    for (int i = 0; i < 8; ++i) {
      bytes[body + i] = static_cast<char>(sum >> (8 * i));
    }
  }
  const absl::StatusOr<SavedState> decoded = DecodeSavedState(bytes);
  if (!decoded.ok()) {
    Check(decoded.status().code() == absl::StatusCode::kDataLoss,
          "a refusal that is not DATA_LOSS");
    return 0;
  }
  const std::string again = EncodeSavedState(*decoded);
  const absl::StatusOr<SavedState> redecoded = DecodeSavedState(again);
  Check(redecoded.ok(), "a re-encoding that does not decode");
  Check(*redecoded == *decoded, "a re-encoding that decodes to another value");
  Check(again == bytes, "an accepted encoding that is not canonical");
  const std::string& handle = decoded->region.handle;
  if (const std::optional<RetainedShmName> kept =
          ParseRetainedShmName(handle, "statecache")) {
    Check(handle.find('/', 1) == std::string::npos &&
              handle.find('\0') == std::string::npos,
          "a retained name that is not one object under /dev/shm");
    const std::optional<RetainedShmName> reparsed = ParseRetainedShmName(
        FormatRetainedShmName("statecache", kept->name.epoch, kept->name.owner,
                              kept->keeper.value_or(0)),
        "statecache");
    Check(reparsed.has_value() && reparsed->name.epoch == kept->name.epoch &&
              reparsed->name.owner == kept->name.owner &&
              reparsed->keeper.value_or(0) == kept->keeper.value_or(0),
          "a retained name whose record does not round-trip");
  }
  const uint64_t image_bytes = decoded->bytes_per_slot;
  const uint64_t file_bytes =
      image_bytes * (decoded->device.size() + decoded->tier.size());
  for (const uint64_t available : {decoded->region.region_bytes, file_bytes}) {
    for (const auto* records : {&decoded->device, &decoded->tier}) {
      for (const SlotMemory::SavedCheckpoint& c : *records) {
        const absl::StatusOr<uint64_t> offset =
            ImageOffset(c.location, image_bytes, available);
        if (!offset.ok()) {
          Check(offset.status().code() == absl::StatusCode::kFailedPrecondition,
                "an ImageOffset refusal that is not FAILED_PRECONDITION");
          continue;
        }
        Check(image_bytes > 0 && *offset <= available &&
                  available - *offset >= image_bytes,
              "an accepted image that passes the end");
        Check(*offset % image_bytes == 0 &&
                  *offset / image_bytes == static_cast<uint64_t>(c.location),
              "an accepted image at another image's place");
      }
    }
  }
  return 0;
}
