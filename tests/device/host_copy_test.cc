// HostCopier against plain memcpy on random tables: unaligned offsets, sizes
// with tails, tables large enough for every thread, concurrent callers.
#include "kernels/host_copy.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/copy_table.h"
#include "kernels/streaming_copy.h"

namespace statecache {
namespace {

// Disjoint random descriptors inside [0, region): destinations carved from
// a shuffled list of segments, sources from the rest (or anywhere when the
// regions differ).
std::vector<CopyDescriptor> RandomTable(std::mt19937_64& rng, uint64_t region,
                                        int count, uint64_t max_bytes,
                                        bool same_region) {
  const uint64_t segment = region / (2 * count);
  std::vector<uint64_t> segments(2 * count);
  for (size_t i = 0; i < segments.size(); ++i) segments[i] = i * segment;
  std::shuffle(segments.begin(), segments.end(), rng);
  std::vector<CopyDescriptor> table;
  for (int i = 0; i < count; ++i) {
    const uint64_t bytes =
        1 + rng() % std::min<uint64_t>(max_bytes, segment - 64);
    const uint64_t dst = segments[i] + rng() % (segment - bytes);
    const uint64_t src_base = same_region
                                  ? segments[count + i]
                                  : rng() % (region / segment) * segment;
    const uint64_t src = src_base + rng() % (segment - bytes);
    table.push_back({src, dst, bytes});
  }
  return table;
}

void Reference(const std::vector<CopyDescriptor>& table, const uint8_t* src,
               uint8_t* dst) {
  for (const CopyDescriptor& d : table) {
    std::memcpy(dst + d.dst_offset, src + d.src_offset, d.bytes);
  }
}

TEST(HostCopyTest, MatchesMemcpyOnRandomTables) {
  std::mt19937_64 rng(11);
  const uint64_t kRegion = 64 << 20;
  std::vector<uint8_t> a(kRegion), b(kRegion), want_a, want_b;
  for (uint8_t& x : a) x = static_cast<uint8_t>(rng());
  for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
  // that force the pool on small tables, streaming on small tables
  // (or never), and the defaults.
  const std::vector<HostCopierOptions> configs = {
      {.num_threads = 1},
      {.num_threads = 1, .streaming_bytes = 0},
      {.num_threads = 3, .inline_bytes = 0, .min_share_bytes = 1},
      {.num_threads = 3,
       .inline_bytes = 0,
       .min_share_bytes = 1,
       .streaming_bytes = 0},
      {.num_threads = 4,
       .inline_bytes = 1 << 10,
       .min_share_bytes = 1 << 12,
       .streaming_bytes = ~uint64_t{0}},
      {},
  };
  for (const HostCopierOptions& options : configs) {
    HostCopier copier(options);
    for (int round = 0; round < 12; ++round) {
      const int count = 1 + static_cast<int>(rng() % 300);
      const uint64_t max_bytes = round % 3 == 0 ? 64 : (8 << 20);
      const bool same = round % 2 == 0;
      const std::vector<CopyDescriptor> table =
          RandomTable(rng, kRegion, count, max_bytes, same);
      ASSERT_TRUE(ValidateCopyTable(table, kRegion, kRegion, same).ok());
      if (same) {
        want_a = a;
        Reference(table, want_a.data(), want_a.data());
        copier.Run(table, a.data(), a.data());
        ASSERT_EQ(a, want_a) << "threads " << options.num_threads;
      } else {
        want_b = b;
        Reference(table, a.data(), want_b.data());
        copier.Run(table, a.data(), b.data());
        ASSERT_EQ(b, want_b) << "threads " << options.num_threads;
      }
    }
  }
}

TEST(HostCopyTest, OneLargeDescriptorIsSharedAndExact) {
  // One 48 MB + 13 byte range: every thread takes a share of it.
  const uint64_t bytes = (48 << 20) + 13;
  std::vector<uint8_t> src(bytes + 7), dst(bytes + 64, 0);
  std::mt19937_64 rng(3);
  for (uint8_t& x : src) x = static_cast<uint8_t>(rng());
  HostCopier copier({.num_threads = 4});
  const std::vector<CopyDescriptor> table = {{7, 3, bytes}};  // unaligned
  copier.Run(table, src.data(), dst.data());
  EXPECT_EQ(dst[0], 0);
  EXPECT_EQ(dst[2], 0);
  EXPECT_EQ(std::memcmp(dst.data() + 3, src.data() + 7, bytes), 0);
  EXPECT_EQ(dst[3 + bytes], 0);
}

TEST(HostCopyTest, ConcurrentCallersAreSerialisedCorrectly) {
  HostCopier copier(
      {.num_threads = 3, .inline_bytes = 0, .min_share_bytes = 1});
  const uint64_t kBytes = 4 << 20;
  std::vector<std::thread> callers;
  std::vector<int> failures(4, 0);
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&, c] {
      std::vector<uint8_t> src(kBytes, static_cast<uint8_t>(c + 1));
      std::vector<uint8_t> dst(kBytes, 0);
      const std::vector<CopyDescriptor> table = {
          {0, 0, kBytes / 2}, {kBytes / 2, kBytes / 2, kBytes / 2}};
      for (int round = 0; round < 20; ++round) {
        std::fill(dst.begin(), dst.end(), 0);
        copier.Run(table, src.data(), dst.data());
        if (dst != src) ++failures[c];
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(failures, std::vector<int>(4, 0));
}

TEST(StreamingCopyTest, EveryAlignmentAndLength) {
  std::mt19937_64 rng(17);
  std::vector<uint8_t> src(3 * 8192 + 512);
  for (uint8_t& x : src) x = static_cast<uint8_t>(rng());
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 600; ++n) lengths.push_back(n);
  // Around the two-page threshold and the 128-byte steps after it.
  for (size_t n = 8192 - 3; n <= 8192 + 300; ++n) lengths.push_back(n);
  for (size_t n : {16384 + 77, 3 * 8192 + 1}) lengths.push_back(n);
  for (size_t n : lengths) {
    for (size_t src_off : {0, 1, 16, 63}) {
      for (size_t dst_off : {0, 5, 32, 64}) {
        std::vector<uint8_t> dst(n + 128, 0xEE);
        StreamingCopy(dst.data() + dst_off, src.data() + src_off, n);
        StreamingFence();
        ASSERT_EQ(std::memcmp(dst.data() + dst_off, src.data() + src_off, n), 0)
            << n << " " << src_off << " " << dst_off;
        for (size_t i = 0; i < dst_off; ++i) ASSERT_EQ(dst[i], 0xEE);
        for (size_t i = dst_off + n; i < dst.size(); ++i) {
          ASSERT_EQ(dst[i], 0xEE);
        }
      }
    }
  }
}

TEST(HostCopyTest, EmptyTableIsANoOp) {
  // Nothing is written for an empty table, nor for one of zero-byte
  // descriptors, on the caller or the pool; and the copier still copies the
  // next table whole (an empty job must not leave the pool waiting).
  const uint64_t kBytes = 4 << 20;
  for (const HostCopierOptions& options :
       {HostCopierOptions{.num_threads = 2, .inline_bytes = 0},
        HostCopierOptions{
            .num_threads = 3, .inline_bytes = 0, .min_share_bytes = 1}}) {
    HostCopier copier(options);
    std::vector<uint8_t> src(kBytes), dst(kBytes, 0xEE);
    std::mt19937_64 rng(5);
    for (uint8_t& x : src) x = static_cast<uint8_t>(rng());
    const std::vector<uint8_t> src_before = src;
    copier.Run({}, src.data(), dst.data());
    EXPECT_EQ(dst, std::vector<uint8_t>(kBytes, 0xEE));
    const std::vector<CopyDescriptor> zero_bytes = {{0, 0, 0},
                                                    {64, kBytes - 1, 0}};
    copier.Run(zero_bytes, src.data(), dst.data());
    EXPECT_EQ(dst, std::vector<uint8_t>(kBytes, 0xEE));
    copier.Run({}, src.data(), src.data());
    EXPECT_EQ(src, src_before);
    const std::vector<CopyDescriptor> whole = {{0, 0, kBytes}};
    copier.Run(whole, src.data(), dst.data());
    EXPECT_EQ(dst, src) << "threads " << options.num_threads;
  }
}

}  // namespace
}  // namespace statecache
