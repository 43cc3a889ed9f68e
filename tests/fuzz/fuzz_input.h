// FuzzInput: a fuzzer's bytes read front to back as the values a target
// draws; zeros once they run out, so every input is a whole run. A target
// draws each value in a statement of its own (never two as arguments of one
// call): argument order is unspecified, and the same bytes must mean the
// same calls under clang's fuzzer and gcc's replay (replay_main.cc).
//
// Thread-compatible.
#ifndef STATECACHE_TESTS_FUZZ_FUZZ_INPUT_H_
#define STATECACHE_TESTS_FUZZ_FUZZ_INPUT_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace statecache {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool done() const { return pos_ >= size_; }
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  // Two bytes, low first: enough for every small domain a target draws
  // from. (Read in two statements: the operands of one expression are
  // unsequenced, and gcc and clang read them in opposite orders, so an
  // input would mean something else in the replay than in the fuzzer.)
  uint16_t Word() {
    const uint8_t low = Byte();
    return static_cast<uint16_t>(low | Byte() << 8);
  }
  // The next `n` bytes, or as many as are left.
  std::string_view Bytes(size_t n) {
    n = std::min(n, size_ - pos_);
    std::string_view out(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace statecache

#endif  // STATECACHE_TESTS_FUZZ_FUZZ_INPUT_H_
