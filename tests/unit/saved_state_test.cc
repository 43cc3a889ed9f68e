// SavedState's encoding (daemon/core/saved_state.h): a round trip keeps
// every field; the bytes are the documented little-endian, length-prefixed
// form ending in a checksum; nothing short of a whole, intact encoding
// decodes (every truncation, every single-bit flip, a wrong magic or
// version is DATA_LOSS); and a count or length no bytes back up is refused
// before anything is reserved for it, checksum or not.
#include "daemon/core/saved_state.h"

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "daemon/common/checksum.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

// The largest single allocation made while `track_allocations` is on: to
// tell a decoder that refuses a huge count before reserving for it from one
// that reserves first (and may well get the memory: it is never touched).
// Replaces the global operator new for this test binary; everything else
// goes through to malloc unchanged (gcc, seeing both halves inlined here,
// would warn that free is not delete: it is, in this binary).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
namespace {
bool track_allocations = false;
size_t largest_allocation = 0;
}  // namespace

void* operator new(size_t size) {
  if (track_allocations && size > largest_allocation) {
    largest_allocation = size;
  }
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t size) { return operator new(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace statecache {

void PrintTo(const SlotMemory::SavedCheckpoint& c, std::ostream* os) {
  *os << "{hash " << c.hash << " at " << c.location
      << (c.speculative ? " speculative" : "") << " sum " << c.checksum << "}";
}

namespace {

using ::testing::HasSubstr;

// The encoding written out field by field, independently of saved_state.cc,
// from the header's description: so the hand-built buffers below are what a
// real index looks like up to the field that is bent.
class Builder {
 public:
  Builder() { out_.append("SCSTATE\n", 8); }
  Builder& U8(uint8_t v) {
    out_.push_back(static_cast<char>(v));
    return *this;
  }
  Builder& U32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>(v >> (8 * i)));
    return *this;
  }
  Builder& U64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>(v >> (8 * i)));
    return *this;
  }
  Builder& Str(std::string_view s) {
    U64(s.size());
    out_.append(s);
    return *this;
  }
  Builder& Record(int64_t hash, int64_t location, uint8_t mark, uint64_t sum) {
    return U64(static_cast<uint64_t>(hash))
        .U64(static_cast<uint64_t>(location))
        .U8(mark)
        .U64(sum);
  }
  // Everything up to the device records, for `state` (version 1).
  Builder& Head(const SavedState& s, uint32_t version = 1) {
    U32(version).Str(s.fingerprint).U64(s.epoch).U64(s.bytes_per_slot);
    Str(s.region.handle)
        .U64(static_cast<uint64_t>(s.region.capacity))
        .U64(static_cast<uint64_t>(s.region.num_slots))
        .U64(s.region.region_bytes);
    return Str(s.device_images);
  }
  Builder& Records(const std::vector<SlotMemory::SavedCheckpoint>& records) {
    U64(records.size());
    for (const SlotMemory::SavedCheckpoint& r : records) {
      Record(r.hash, r.location, r.speculative ? 1 : 0, r.checksum);
    }
    return *this;
  }
  // The bytes, sealed with the trailing checksum of all before it.
  std::string Sealed() const {
    Builder b = *this;
    b.U64(Checksum(out_.data(), out_.size()));
    return b.out_;
  }
  const std::string& raw() const { return out_; }

 private:
  std::string out_;
};

SavedState FullState() {
  SavedState s;
  s.fingerprint = "identity=model-a;transfer=fork:1:midstep;layout=0x1234abcd";
  s.epoch = 0x0102030405060708ull;
  s.bytes_per_slot = 4096 + 17;
  s.region = {.handle = "/statecache-77-1234-5678-kept",
              .capacity = 64,
              .num_slots = 48,
              .region_bytes = 48 * (4096 + 17)};
  s.device_images = "device-77.images";
  s.device = {
      {.hash = 0, .location = 3, .speculative = false, .checksum = 1},
      {.hash = (int64_t{1} << 62) + 5,
       .location = 0,
       .speculative = true,
       .checksum = ~uint64_t{0}},
      {.hash = 991, .location = 47, .speculative = false, .checksum = 0},
      {.hash = std::numeric_limits<int64_t>::max(),
       .location = 12,
       .speculative = true,
       .checksum = 0x8000000000000001ull}};
  s.tier_images = "tier-77.images";
  s.tier = {{.hash = 5, .location = 1, .speculative = false, .checksum = 42},
            {.hash = 6, .location = 0, .speculative = true, .checksum = 43}};
  return s;
}

std::string Full() { return EncodeSavedState(FullState()); }

TEST(SavedStateTest, ARoundTripKeepsEveryField) {
  const SavedState state = FullState();
  absl::StatusOr<SavedState> back = DecodeSavedState(EncodeSavedState(state));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, state);
  // Field by field too, so a failure says which one.
  EXPECT_EQ(back->fingerprint, state.fingerprint);
  EXPECT_EQ(back->epoch, state.epoch);
  EXPECT_EQ(back->bytes_per_slot, state.bytes_per_slot);
  EXPECT_EQ(back->region, state.region);
  EXPECT_EQ(back->device_images, state.device_images);
  EXPECT_EQ(back->device, state.device);
  EXPECT_EQ(back->tier_images, state.tier_images);
  EXPECT_EQ(back->tier, state.tier);

  // An empty state (a first save with nothing to keep) too.
  absl::StatusOr<SavedState> empty =
      DecodeSavedState(EncodeSavedState(SavedState{}));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(*empty, SavedState{});
  // Images only, no region (the GPU backends' shutdown index).
  SavedState images_only = state;
  images_only.region = SavedRegion{};
  ASSERT_TRUE(DecodeSavedState(EncodeSavedState(images_only)).ok());
  EXPECT_EQ(*DecodeSavedState(EncodeSavedState(images_only)), images_only);
  // States that differ in one field encode differently.
  SavedState flipped = state;
  flipped.device[1].speculative = false;
  EXPECT_NE(EncodeSavedState(flipped), EncodeSavedState(state));
  EXPECT_EQ(*DecodeSavedState(EncodeSavedState(flipped)), flipped);
}

TEST(SavedStateTest, TheBytesAreTheDocumentedLittleEndianForm) {
  const SavedState state = FullState();
  const std::string built = Builder()
                                .Head(state)
                                .Records(state.device)
                                .Str(state.tier_images)
                                .Records(state.tier)
                                .Sealed();
  EXPECT_EQ(EncodeSavedState(state), built);
  // And what was built by hand decodes to the state.
  absl::StatusOr<SavedState> back = DecodeSavedState(built);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, state);
}

TEST(SavedStateTest, EveryTruncationIsDataLoss) {
  const std::string full = Full();
  ASSERT_GT(full.size(), 200u);
  for (size_t n = 0; n < full.size(); ++n) {
    absl::StatusOr<SavedState> got =
        DecodeSavedState(std::string_view(full).substr(0, n));
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss)
        << n << " of " << full.size() << " bytes: " << got.status();
  }
  // A torn write that kept the tail's checksum slot but not its value is
  // the same: every prefix resealed is still refused, by its parser (the
  // checksum now passes).
  const std::string body = full.substr(0, full.size() - 8);
  for (size_t n = 8; n < body.size(); ++n) {
    const std::string resealed = [&] {
      std::string s = body.substr(0, n);
      const uint64_t sum = Checksum(s.data(), s.size());
      for (int i = 0; i < 8; ++i)
        s.push_back(static_cast<char>(sum >> (8 * i)));
      return s;
    }();
    absl::StatusOr<SavedState> got = DecodeSavedState(resealed);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss)
        << "resealed prefix of " << n << " bytes: " << got.status();
  }
}

TEST(SavedStateTest, EverySingleBitFlipIsDataLoss) {
  const std::string full = Full();
  for (size_t byte = 0; byte < full.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bent = full;
      bent[byte] = static_cast<char>(bent[byte] ^ (1 << bit));
      absl::StatusOr<SavedState> got = DecodeSavedState(bent);
      ASSERT_EQ(got.status().code(), absl::StatusCode::kDataLoss)
          << "byte " << byte << " bit " << bit << ": " << got.status();
    }
  }
  // Bytes appended after the checksum move the checksum: refused as well.
  EXPECT_EQ(DecodeSavedState(full + '\0').status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(SavedStateTest, AWrongMagicOrVersionSaysSo) {
  std::string bent = Full();
  bent[0] = 'X';
  absl::StatusOr<SavedState> got = DecodeSavedState(bent);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(), HasSubstr("not a statecache state"));

  // Version 2, sealed with a valid checksum: the version is what is wrong.
  const SavedState state = FullState();
  const std::string v2 = Builder()
                             .Head(state, /*version=*/2)
                             .Records(state.device)
                             .Str(state.tier_images)
                             .Records(state.tier)
                             .Sealed();
  got = DecodeSavedState(v2);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(), HasSubstr("version 2"));
  EXPECT_THAT(got.status().message(), HasSubstr("reads 1"));

  // A flip in the body without resealing: the checksum says so.
  std::string flipped = Full();
  flipped[20] ^= 1;
  got = DecodeSavedState(flipped);
  EXPECT_THAT(got.status().message(), HasSubstr("checksum mismatch"));

  got = DecodeSavedState("SCSTATE\n");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(), HasSubstr("too short"));
}

// Sealed buffers (valid checksum) whose counts and lengths no bytes back
// up: refused, and nothing the size of the claim is allocated.
TEST(SavedStateTest, HugeCountsAndLengthsAreRefusedWithoutAllocating) {
  const SavedState state = FullState();
  struct Case {
    const char* what;
    std::string bytes;
  };
  std::vector<Case> cases;
  for (uint64_t count : {~uint64_t{0}, uint64_t{1} << 62, uint64_t{1} << 40,
                         uint64_t{1} << 26, uint64_t{1000}}) {
    // Device records claimed, three there (75 bytes: the check must not
    // round this into "enough").
    Builder device = Builder().Head(state).U64(count);
    for (int i = 0; i < 3; ++i) device.Record(i, i, 0, 7);
    cases.push_back({"device count", device.Sealed()});
    // Tier records claimed after valid device records.
    Builder tier = Builder()
                       .Head(state)
                       .Records(state.device)
                       .Str(state.tier_images)
                       .U64(count);
    tier.Record(1, 1, 0, 1);
    cases.push_back({"tier count", tier.Sealed()});
    // String lengths: the fingerprint's, the handle's, the images' names.
    cases.push_back(
        {"fingerprint length", Builder().U32(1).U64(count).Sealed()});
    cases.push_back(
        {"handle length",
         Builder().U32(1).Str("fp").U64(1).U64(1).U64(count).Sealed()});
    cases.push_back(
        {"tier images length",
         Builder().Head(state).Records(state.device).U64(count).Sealed()});
  }
  // One record more than the bytes hold, exactly.
  Builder one_more = Builder().Head(state).U64(state.device.size() + 1);
  for (const auto& r : state.device) {
    one_more.Record(r.hash, r.location, 0, r.checksum);
  }
  cases.push_back({"one record short", one_more.Sealed()});
  // A string just over the limit of 4096 with its bytes all there.
  cases.push_back({"4097-byte fingerprint",
                   Builder().U32(1).Str(std::string(4097, 'f')).Sealed()});

  // The tracker sees the decoder's allocations (a valid state's strings
  // and records), so a zero below is not a tracker that never ran.
  largest_allocation = 0;
  track_allocations = true;
  ASSERT_TRUE(DecodeSavedState(Full()).ok());
  track_allocations = false;
  ASSERT_GE(largest_allocation,
            state.device.size() * sizeof(SlotMemory::SavedCheckpoint));

  for (const Case& c : cases) {
    largest_allocation = 0;
    track_allocations = true;
    absl::StatusOr<SavedState> got = DecodeSavedState(c.bytes);
    track_allocations = false;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss)
        << c.what << ": " << got.status();
    // Nothing near the claim: at most a few times the input (the message,
    // the strings that were there).
    EXPECT_LT(largest_allocation, 4 * c.bytes.size() + 4096) << c.what;
  }
  // The limit itself is fine.
  SavedState at_limit;
  at_limit.fingerprint = std::string(4096, 'f');
  EXPECT_TRUE(DecodeSavedState(EncodeSavedState(at_limit)).ok());
}

// The values the decoder refuses although every length checks out.
TEST(SavedStateTest, MalformedValuesAreDataLoss) {
  const SavedState state = FullState();
  auto with_device = [&](int64_t hash, int64_t location, uint8_t mark) {
    return Builder()
        .Head(state)
        .U64(1)
        .Record(hash, location, mark, 9)
        .Str("")
        .U64(0)
        .Sealed();
  };
  ASSERT_TRUE(DecodeSavedState(with_device(5, 5, 1)).ok());
  for (const std::string& bytes :
       {with_device(-1, 5, 0), with_device(5, -1, 0), with_device(5, 5, 2),
        with_device(std::numeric_limits<int64_t>::min(), 0, 0)}) {
    absl::StatusOr<SavedState> got = DecodeSavedState(bytes);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(got.status().message(), HasSubstr("malformed"));
  }
  // A region using more slots than it was laid out for, or negative sizes.
  for (auto [capacity, num_slots] :
       std::vector<std::pair<int64_t, int64_t>>{{4, 5}, {-1, 0}, {4, -2}}) {
    SavedState bad = state;
    bad.region.capacity = capacity;
    bad.region.num_slots = num_slots;
    const std::string bytes = Builder()
                                  .Head(bad)
                                  .Records(bad.device)
                                  .Str(bad.tier_images)
                                  .Records(bad.tier)
                                  .Sealed();
    absl::StatusOr<SavedState> got = DecodeSavedState(bytes);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss)
        << capacity << " / " << num_slots;
    EXPECT_THAT(got.status().message(), HasSubstr("region"));
  }
  // Bytes after the last record, inside the checksum.
  const std::string trailing = Builder()
                                   .Head(state)
                                   .Records(state.device)
                                   .Str(state.tier_images)
                                   .Records(state.tier)
                                   .U8(0)
                                   .Sealed();
  absl::StatusOr<SavedState> got = DecodeSavedState(trailing);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(), HasSubstr("after the last record"));
}

}  // namespace
}  // namespace statecache
