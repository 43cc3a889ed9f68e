// A step channel's object mapped by hand, for tests and fuzzers that play a
// hostile co-located client: they write whatever they like into the request
// area and the control block (not through StepChannelClient, which only
// writes well-formed requests), publish it as proto/step_channel.h says
// (request_seq + 1, then a wake-up) and wait for the daemon's answer with a
// deadline; and what a client or operator can see of the daemon, less what
// the channels' own thread changes. No test framework here (the fuzzers use
// it too).
//
// Thread-compatible.
#ifndef STATECACHE_TESTS_SERVICE_RAW_STEP_CHANNEL_H_
#define STATECACHE_TESTS_SERVICE_RAW_STEP_CHANNEL_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/statecache/v1/statecache.pb.h"
#include "proto/step_channel.h"
#include "tests/service/random_operations.h"

namespace statecache {

class RawStepChannel {
 public:
  // Maps the object `opened` names (before its first request: the daemon
  // unlinks the name then). Null when it cannot be opened or mapped.
  static std::unique_ptr<RawStepChannel> Map(
      const v1::OpenStepChannelResponse& opened) {
    const int fd = ::shm_open(opened.shm_name().c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) return nullptr;
    void* base = ::mmap(nullptr, opened.object_bytes(), PROT_READ | PROT_WRITE,
                        MAP_SHARED, fd, 0);
    ::close(fd);
    if (base == MAP_FAILED) return nullptr;
    std::unique_ptr<RawStepChannel> channel(new RawStepChannel(
        static_cast<char*>(base), static_cast<size_t>(opened.object_bytes())));
    // The daemon's layout, checked once: the areas must lie in the object.
    const RawStepChannel& c = *channel;
    if (c.bytes_ < step_channel::kControlBytes ||
        c.request_offset_ != step_channel::kControlBytes ||
        c.request_bytes_ < step_channel::kHeaderBytes ||
        c.reply_offset_ != c.request_offset_ + c.request_bytes_ ||
        c.reply_bytes_ < step_channel::kHeaderBytes ||
        c.reply_offset_ + c.reply_bytes_ != c.bytes_) {
      return nullptr;
    }
    return channel;
  }
  ~RawStepChannel() { ::munmap(base_, bytes_); }
  RawStepChannel(const RawStepChannel&) = delete;
  RawStepChannel& operator=(const RawStepChannel&) = delete;

  char* base() { return base_; }
  size_t object_bytes() const { return bytes_; }
  // The areas as the daemon laid them out (read once, at Map: what the
  // control block says later is the client's own scribbling).
  char* request_area() { return base_ + request_offset_; }
  size_t request_bytes() const { return request_bytes_; }
  const char* reply_area() const { return base_ + reply_offset_; }
  size_t reply_bytes() const { return reply_bytes_; }

  uint32_t word(size_t offset) {
    return step_channel::Word(base_, offset).load();
  }
  void set_word(size_t offset, uint32_t value) {
    step_channel::Word(base_, offset).store(value);
  }
  bool closed() { return word(step_channel::control::kClosed) != 0; }

  // Publishes what the request area holds: request_seq + 1, and a wake-up
  // whether or not the daemon says it sleeps (as a client that cannot order
  // its loads does). Returns the sequence number its reply will carry.
  uint32_t Publish() {
    namespace sc = step_channel;
    const uint32_t seq = word(sc::control::kRequestSeq) + 1;
    set_word(sc::control::kRequestSeq, seq);
    sc::FutexWake(sc::WordAddress(base_, sc::control::kRequestSeq));
    return seq;
  }

  enum class Answer { kReplied, kClosed, kTimedOut };
  // Waits until reply_seq is `seq` (kReplied) or the daemon set `closed`
  // (kClosed; a reply published before it still counts), for at most
  // `limit`. Sleeps on the futex between looks (never only sleeps).
  Answer Wait(uint32_t seq, absl::Duration limit) {
    namespace sc = step_channel;
    const absl::Time deadline = absl::Now() + limit;
    for (;;) {
      const uint32_t at = word(sc::control::kReplySeq);
      if (at == seq) return Answer::kReplied;
      if (closed()) {
        return word(sc::control::kReplySeq) == seq ? Answer::kReplied
                                                   : Answer::kClosed;
      }
      if (absl::Now() > deadline) return Answer::kTimedOut;
      set_word(sc::control::kClientWaiting, 1);
      sc::FutexWait(sc::WordAddress(base_, sc::control::kReplySeq), at,
                    absl::Microseconds(500));
      set_word(sc::control::kClientWaiting, 0);
    }
  }
  // Waits for `closed` for at most `limit`: whether it was set.
  bool WaitClosed(absl::Duration limit) {
    namespace sc = step_channel;
    const absl::Time deadline = absl::Now() + limit;
    while (!closed()) {
      if (absl::Now() > deadline) return false;
      // The daemon wakes reply_seq's waiters when it closes.
      sc::FutexWait(sc::WordAddress(base_, sc::control::kReplySeq),
                    word(sc::control::kReplySeq), absl::Microseconds(500));
    }
    return true;
  }

  // Publishes a request of `command` alone (no columns) and waits.
  Answer Send(step_channel::Command command, absl::Duration limit) {
    step_channel::WriteCommand(command, request_area());
    return Wait(Publish(), limit);
  }

  // The reply in the reply area now: its header, and the whole reply when
  // it fits the area (else its first part).
  step_channel::ReplyHeader reply_header() const {
    step_channel::ReplyHeader header;
    std::memcpy(&header, reply_area(), sizeof(header));
    return header;
  }
  // Reads the whole reply to the request just answered, sending kContinue
  // for each further part as a client does. Empty when the reply's length
  // is out of bounds or a part is not answered within `limit`.
  std::string ReadReply(absl::Duration limit) {
    const step_channel::ReplyHeader header = reply_header();
    if (header.total_bytes < step_channel::kHeaderBytes ||
        header.total_bytes > (uint64_t{1} << 32)) {
      return "";
    }
    std::string reply;
    for (;;) {
      const size_t part =
          std::min<size_t>(header.total_bytes - reply.size(), reply_bytes_);
      reply.append(reply_area(), part);
      if (reply.size() == header.total_bytes) return reply;
      if (Send(step_channel::kContinue, limit) != Answer::kReplied) return "";
    }
  }

 private:
  RawStepChannel(char* base, size_t bytes) : base_(base), bytes_(bytes) {
    namespace sc = step_channel;
    uint64_t areas[4] = {};
    if (bytes_ >= sc::kControlBytes) {
      std::memcpy(areas, base_ + sc::control::kRequestOffset, sizeof(areas));
    }
    request_offset_ = areas[0];
    request_bytes_ = areas[1];
    reply_offset_ = areas[2];
    reply_bytes_ = areas[3];
  }

  char* base_;
  size_t bytes_;
  size_t request_offset_ = 0;
  size_t request_bytes_ = 0;
  size_t reply_offset_ = 0;
  size_t reply_bytes_ = 0;
};

// Visible (random_operations.h) less the step channel counters, which the
// channels' heartbeat thread changes on its own time (it reaps ended
// channels): what a request over a channel must leave alone.
inline std::string VisibleLessChannels(StateCache& cache) {
  return Visible(cache, /*channel_counts=*/false);
}

}  // namespace statecache

#endif  // STATECACHE_TESTS_SERVICE_RAW_STEP_CHANNEL_H_
