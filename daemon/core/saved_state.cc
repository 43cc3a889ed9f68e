#include "daemon/core/saved_state.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/checksum.h"
#include "daemon/common/status_macros.h"

namespace statecache {
namespace {

constexpr char kMagic[8] = {'S', 'C', 'S', 'T', 'A', 'T', 'E', '\n'};
constexpr uint32_t kVersion = 1;
// Longest string field: names and fingerprints are short.
constexpr uint64_t kMaxString = 4096;
// A checkpoint record: hash, location, mark, checksum.
constexpr uint64_t kRecordBytes = 8 + 8 + 1 + 8;

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) { Fixed(v, 4); }
  void U64(uint64_t v) { Fixed(v, 8); }
  void Str(std::string_view s) {
    U64(s.size());
    out_.append(s);
  }
  void Records(const std::vector<SlotMemory::SavedCheckpoint>& records) {
    U64(records.size());
    for (const SlotMemory::SavedCheckpoint& r : records) {
      U64(static_cast<uint64_t>(r.hash));
      U64(static_cast<uint64_t>(r.location));
      U8(r.speculative ? 1 : 0);
      U64(r.checksum);
    }
  }
  std::string& out() { return out_; }

 private:
  void Fixed(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i)
      out_.push_back(static_cast<char>(v >> (8 * i)));
  }
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  absl::StatusOr<uint64_t> Fixed(int bytes, const char* what) {
    if (in_.size() < static_cast<size_t>(bytes)) return Short(what);
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) {
      v |= static_cast<uint64_t>(static_cast<uint8_t>(in_[i])) << (8 * i);
    }
    in_.remove_prefix(bytes);
    return v;
  }
  absl::StatusOr<std::string> Str(const char* what) {
    ASSIGN_OR_RETURN(const uint64_t size, Fixed(8, what));
    if (size > kMaxString || size > in_.size()) {
      return absl::DataLossError(
          absl::StrCat("state index: ", what, " length ", size,
                       " runs past the end or the limit"));
    }
    std::string s(in_.substr(0, size));
    in_.remove_prefix(size);
    return s;
  }
  absl::Status Records(const char* what,
                       std::vector<SlotMemory::SavedCheckpoint>& out) {
    ASSIGN_OR_RETURN(const uint64_t count, Fixed(8, what));
    if (count > in_.size() / kRecordBytes) {
      return absl::DataLossError(absl::StrCat("state index: ", count, " ", what,
                                              " records run past the end"));
    }
    out.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      SlotMemory::SavedCheckpoint r;
      ASSIGN_OR_RETURN(const uint64_t hash, Fixed(8, what));
      ASSIGN_OR_RETURN(const uint64_t location, Fixed(8, what));
      ASSIGN_OR_RETURN(const uint64_t mark, Fixed(1, what));
      ASSIGN_OR_RETURN(r.checksum, Fixed(8, what));
      r.hash = static_cast<int64_t>(hash);
      r.location = static_cast<int64_t>(location);
      if (r.hash < 0 || r.location < 0 || mark > 1) {
        return absl::DataLossError(absl::StrCat(
            "state index: ", what, " record ", i, " is malformed"));
      }
      r.speculative = mark == 1;
      out.push_back(r);
    }
    return absl::OkStatus();
  }
  bool empty() const { return in_.empty(); }

 private:
  static absl::Status Short(const char* what) {
    return absl::DataLossError(absl::StrCat("state index: ends inside ", what));
  }
  std::string_view in_;
};

}  // namespace

std::string EncodeSavedState(const SavedState& state) {
  Writer w;
  w.out().append(kMagic, sizeof(kMagic));
  w.U32(kVersion);
  w.Str(state.fingerprint);
  w.U64(state.epoch);
  w.U64(state.bytes_per_slot);
  w.Str(state.region.handle);
  w.U64(static_cast<uint64_t>(state.region.capacity));
  w.U64(static_cast<uint64_t>(state.region.num_slots));
  w.U64(state.region.region_bytes);
  w.Str(state.device_images);
  w.Records(state.device);
  w.Str(state.tier_images);
  w.Records(state.tier);
  const uint64_t sum = Checksum(w.out().data(), w.out().size());
  w.U64(sum);
  return std::move(w.out());
}

absl::StatusOr<SavedState> DecodeSavedState(std::string_view bytes) {
  if (bytes.size() < sizeof(kMagic) + 4 + 8) {
    return absl::DataLossError(absl::StrCat("state index: ", bytes.size(),
                                            " bytes is too short to be one"));
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError("state index: not a statecache state index");
  }
  const std::string_view body = bytes.substr(0, bytes.size() - 8);
  Reader trailer(bytes.substr(bytes.size() - 8));
  ASSIGN_OR_RETURN(const uint64_t sum, trailer.Fixed(8, "the checksum"));
  if (Checksum(body.data(), body.size()) != sum) {
    return absl::DataLossError(
        "state index: checksum mismatch (torn or corrupted)");
  }
  Reader r(body.substr(sizeof(kMagic)));
  ASSIGN_OR_RETURN(const uint64_t version, r.Fixed(4, "the version"));
  if (version != kVersion) {
    return absl::DataLossError(absl::StrCat("state index: version ", version,
                                            ", this daemon reads ", kVersion));
  }
  SavedState state;
  ASSIGN_OR_RETURN(state.fingerprint, r.Str("the fingerprint"));
  ASSIGN_OR_RETURN(state.epoch, r.Fixed(8, "the epoch"));
  ASSIGN_OR_RETURN(state.bytes_per_slot, r.Fixed(8, "bytes_per_slot"));
  ASSIGN_OR_RETURN(state.region.handle, r.Str("the region handle"));
  ASSIGN_OR_RETURN(const uint64_t capacity, r.Fixed(8, "the region"));
  ASSIGN_OR_RETURN(const uint64_t num_slots, r.Fixed(8, "the region"));
  ASSIGN_OR_RETURN(state.region.region_bytes, r.Fixed(8, "the region"));
  state.region.capacity = static_cast<int64_t>(capacity);
  state.region.num_slots = static_cast<int64_t>(num_slots);
  if (state.region.capacity < 0 || state.region.num_slots < 0 ||
      state.region.num_slots > state.region.capacity) {
    return absl::DataLossError("state index: the region's sizes are malformed");
  }
  ASSIGN_OR_RETURN(state.device_images, r.Str("the device images' name"));
  RETURN_IF_ERROR(r.Records("device", state.device));
  ASSIGN_OR_RETURN(state.tier_images, r.Str("the tier images' name"));
  RETURN_IF_ERROR(r.Records("tier", state.tier));
  if (!r.empty()) {
    return absl::DataLossError("state index: bytes after the last record");
  }
  return state;
}

absl::StatusOr<uint64_t> ImageOffset(int64_t location, uint64_t image_bytes,
                                     uint64_t available_bytes) {
  if (image_bytes == 0) {
    return absl::FailedPreconditionError("images of 0 bytes");
  }
  const uint64_t images = available_bytes / image_bytes;
  if (location < 0 || static_cast<uint64_t>(location) >= images) {
    return absl::FailedPreconditionError(absl::StrCat(
        "image ", location, " lies outside ", available_bytes, " bytes (",
        images, " images of ", image_bytes, " bytes)"));
  }
  return static_cast<uint64_t>(location) * image_bytes;
}

}  // namespace statecache
