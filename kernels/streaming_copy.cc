#include "kernels/streaming_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace statecache {

#if defined(__x86_64__)
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kLine = 64;

// One loop body for both vector widths: V is the vector type, LOAD/STORE
// its unaligned load and streaming store. Copies whole 128-byte steps of
// two pages at once, then single 128-byte steps; returns the bytes copied.
// A macro rather than a template: the AVX2 instance must be compiled inside
// a target("avx2") function, which a shared template body is not.
#define STATECACHE_STREAM_LOOP(V, LOAD, STORE)                                 \
  size_t done = 0;                                                             \
  constexpr size_t kWidth = sizeof(V);                                         \
  constexpr size_t kStep = 128;                                                \
  for (; done + 2 * kPage <= bytes; done += 2 * kPage) {                       \
    const char* s = src + done;                                                \
    char* d = dst + done;                                                      \
    for (size_t off = 0; off < kPage; off += kStep) {                          \
      _mm_prefetch(s + off + 2 * kStep, _MM_HINT_T0);                          \
      _mm_prefetch(s + kPage + off + 2 * kStep, _MM_HINT_T0);                  \
      V a[kStep / kWidth], b[kStep / kWidth];                                  \
      for (size_t k = 0; k < kStep / kWidth; ++k) {                            \
        a[k] = LOAD(reinterpret_cast<const V*>(s + off + k * kWidth));         \
        b[k] = LOAD(reinterpret_cast<const V*>(s + kPage + off + k * kWidth)); \
      }                                                                        \
      for (size_t k = 0; k < kStep / kWidth; ++k) {                            \
        STORE(reinterpret_cast<V*>(d + off + k * kWidth), a[k]);               \
        STORE(reinterpret_cast<V*>(d + kPage + off + k * kWidth), b[k]);       \
      }                                                                        \
    }                                                                          \
  }                                                                            \
  for (; done + kStep <= bytes; done += kStep) {                               \
    V a[kStep / kWidth];                                                       \
    for (size_t k = 0; k < kStep / kWidth; ++k) {                              \
      a[k] = LOAD(reinterpret_cast<const V*>(src + done + k * kWidth));        \
    }                                                                          \
    for (size_t k = 0; k < kStep / kWidth; ++k) {                              \
      STORE(reinterpret_cast<V*>(dst + done + k * kWidth), a[k]);              \
    }                                                                          \
  }                                                                            \
  return done;

// REQUIRES (both): dst 64-byte aligned.
__attribute__((target("avx2"))) size_t StreamAvx2(char* dst, const char* src,
                                                  size_t bytes){
    STATECACHE_STREAM_LOOP(__m256i, _mm256_loadu_si256, _mm256_stream_si256)}

size_t StreamSse2(char* dst, const char* src, size_t bytes) {
  STATECACHE_STREAM_LOOP(__m128i, _mm_loadu_si128, _mm_stream_si128)
}

#undef STATECACHE_STREAM_LOOP

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

}  // namespace

void StreamingCopy(void* dst_void, const void* src_void, size_t bytes) {
  char* dst = static_cast<char*>(dst_void);
  const char* src = static_cast<const char*>(src_void);
  if (bytes < 2 * kPage) {
    std::memcpy(dst, src, bytes);
    return;
  }
  // Align the destination to a cache line: streaming stores then write
  // whole lines.
  const size_t head =
      (kLine - reinterpret_cast<uintptr_t>(dst) % kLine) % kLine;
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  bytes -= head;
  const size_t done =
      HasAvx2() ? StreamAvx2(dst, src, bytes) : StreamSse2(dst, src, bytes);
  std::memcpy(dst + done, src + done, bytes - done);
}

void StreamingFence() { _mm_sfence(); }

#else  // not x86-64

void StreamingCopy(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

void StreamingFence() {}

#endif

}  // namespace statecache
