// The step channel's shared memory: how a co-located scheduler and the daemon
// exchange Steps without gRPC. One POSIX shared-memory object per channel,
// created by the daemon (OpenStepChannel), mapped by both; this header is
// the whole contract, and the Python package (statecache/_channel.py)
// follows it byte for byte.
//
// The object, little-endian, every offset a multiple of 8:
//
//   [0, 256)        the control block (ChannelControl's offsets below);
//   [256, 256+R)    the request area: one request, written by the client;
//   [256+R, +P)     the reply area: one reply, written by the daemon.
//
// One request at a time, strictly in turn (a one-entry ring): the client
// writes a request into the request area and then increments request_seq;
// the daemon serves it, writes the reply into the reply area and then sets
// reply_seq to request_seq. Each side waits on the other's sequence word
// with a futex (shared, not private): it first spins a little, then sets
// its `*_waiting` word and calls FUTEX_WAIT, and the other side calls
// FUTEX_WAKE after publishing a sequence number when that word is set. A
// client that cannot order its store of request_seq before its load of
// daemon_waiting (Python) simply always wakes.
//
// A client may announce a pass it is about to build: it stores the
// request_seq that pass will publish in `expect_seq` and wakes the daemon.
// The daemon then polls for that request for up to its longer expect
// window instead of sleeping, so a pass that takes a while to build (a
// Python scheduler's) does not pay a wake-up when it is published. An
// announcement is a hint: nothing else depends on it, and a stale or
// hostile one costs the daemon at most one expect window of polling per
// wake-up. A client that reads a reply may announce its next pass at once,
// without a wake-up (the daemon is still polling then): a scheduler that
// builds its next pass within the window never waits on a wake-up.
//
// A request (RequestHeader, then its columns) is a command:
//   kStep:     a Step of the session the channel is bound to, its
//              operations as PackedOperations' columns, fixed width:
//              args and hashes as int64, kinds and request_id_lengths as
//              uint32, request_ids as bytes. The daemon copies them into a
//              PackedOperations and runs StateCache::Step with the peer that
//              opened the channel: the same validation, fair turns, limits,
//              metrics and results as a Step over gRPC.
//   kPing:     nothing: the reply is an empty OK reply (the channel's bare
//              round trip).
//   kContinue: the next part of a reply larger than the reply area.
//   kClose:    the client is done; the daemon closes the channel (no reply).
//
// A reply (ReplyHeader, then its columns) is the StepResponse: either the
// whole Step's refusal (status != 0: the gRPC code and its message, what
// the Step would have returned over gRPC) or PackedResults' columns, fixed
// width: values, late_values and hashes as int64, codes,
// request_id_lengths and message_lengths as uint32, then request_ids and
// messages (every message's bytes, concatenated) as bytes. When the whole
// reply (header and columns, ReplyHeader::total_bytes) is larger than the
// reply area, the area holds its first reply-area bytes; the client copies
// them and sends kContinue for each following part, which the daemon
// answers with the next reply-area bytes of the same reply.
//
// Columns follow their header in the order listed, each starting at the
// next multiple of 8 from the header's start.
//
// Lifetime: the daemon unlinks the object's name once the client's first
// request arrives (or the channel closes, or the client never comes), so a
// crash leaves nothing behind; a dead daemon's leftovers are removed at the
// next start. The daemon sets `closed` (and wakes the client) when the
// channel ends: the client's kClose, its session ending (detach, eviction,
// lease expiry), or the daemon stopping. A client waiting for a reply that
// sees `heartbeat` stand still for several heartbeat periods treats the
// daemon as gone (UNAVAILABLE, as gRPC would say).
//
// Thread-safety: the functions here are pure or act on the caller's
// buffers; the mapping itself is shared between processes through the
// atomics of the control block.
#ifndef STATECACHE_PROTO_STEP_CHANNEL_H_
#define STATECACHE_PROTO_STEP_CHANNEL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/statecache/v1/statecache.pb.h"

namespace statecache::step_channel {

// "SCSTEPC1" read as a little-endian uint64.
inline constexpr uint64_t kMagic = 0x3143504554534353ULL;
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kControlBytes = 256;
inline constexpr size_t kHeaderBytes = 64;  // RequestHeader, ReplyHeader

// The control block's fields, by byte offset. Written once by the daemon
// before the name is handed out: magic .. heartbeat_ms. Then:
//   heartbeat:   incremented by the daemon every heartbeat_ms while it runs;
//   closed:      set to 1 by the daemon when the channel ends;
//   request_seq: the client's futex word (incremented per request);
//   daemon_waiting: 1 while the daemon sleeps on request_seq;
//   expect_seq:  the request_seq of a pass the client announced (0: none);
//   reply_seq:   the daemon's futex word (= the request_seq it answered);
//   client_waiting: 1 while the client sleeps on reply_seq.
// The two sides' words sit on their own cache lines.
namespace control {
inline constexpr size_t kMagic = 0;            // uint64
inline constexpr size_t kVersion = 8;          // uint32
inline constexpr size_t kControlBytes = 12;    // uint32 (256)
inline constexpr size_t kRequestOffset = 16;   // uint64
inline constexpr size_t kRequestBytes = 24;    // uint64
inline constexpr size_t kReplyOffset = 32;     // uint64
inline constexpr size_t kReplyBytes = 40;      // uint64
inline constexpr size_t kHeartbeat = 48;       // uint64
inline constexpr size_t kHeartbeatMs = 56;     // uint32
inline constexpr size_t kClosed = 60;          // uint32
inline constexpr size_t kRequestSeq = 64;      // uint32
inline constexpr size_t kDaemonWaiting = 68;   // uint32
inline constexpr size_t kExpectSeq = 72;       // uint32
inline constexpr size_t kReplySeq = 128;       // uint32
inline constexpr size_t kClientWaiting = 132;  // uint32
}  // namespace control

enum Command : uint32_t {
  kStep = 1,
  kPing = 2,
  kContinue = 3,
  kClose = 4,
};

// At the start of the request area.
struct RequestHeader {
  uint32_t command = 0;
  uint32_t kinds = 0;               // entries
  uint32_t request_id_lengths = 0;  // entries
  uint32_t request_ids = 0;         // bytes
  uint32_t args = 0;                // entries
  uint32_t hashes = 0;              // entries
  uint32_t reserved[10] = {};       // zero
};
static_assert(sizeof(RequestHeader) == kHeaderBytes);

// At the start of a reply (the reply area's first part).
struct ReplyHeader {
  uint32_t status = 0;              // the whole Step's gRPC code; 0 OK
  uint32_t status_message = 0;      // bytes
  uint32_t codes = 0;               // entries
  uint32_t values = 0;              // entries
  uint32_t late_values = 0;         // entries
  uint32_t hashes = 0;              // entries
  uint32_t request_id_lengths = 0;  // entries
  uint32_t request_ids = 0;         // bytes
  uint32_t messages = 0;            // entries (of message_lengths)
  uint32_t message_bytes = 0;       // bytes
  uint64_t total_bytes = 0;         // the whole reply, header included
  uint64_t epoch = 0;               // StepResponse.epoch
  uint32_t reserved[2] = {};        // zero
};
static_assert(sizeof(ReplyHeader) == kHeaderBytes);

// The next multiple of 8 at or after `n`.
constexpr size_t Align8(size_t n) { return (n + 7) & ~size_t{7}; }

// The shared-memory object's size for areas of `request_bytes` and
// `reply_bytes` (each a multiple of 8, at least kHeaderBytes).
constexpr size_t ObjectBytes(size_t request_bytes, size_t reply_bytes) {
  return kControlBytes + request_bytes + reply_bytes;
}

// The request for `packed`'s columns, written at `area` (capacity `bytes`).
// Returns the bytes written, or 0 when it does not fit (the caller sends it
// over gRPC instead).
size_t WriteStepRequest(const v1::PackedOperations& packed, char* area,
                        size_t bytes);

// A request of `command` without columns (kPing, kContinue, kClose).
void WriteCommand(Command command, char* area);

// Reads a kStep request from `area` (capacity `bytes`, which a hostile
// client wrote: every count is checked against the area before anything is
// read) into `packed` (replaced). The column contents are
// ValidatePackedOperations' (through StateCache::Step) to judge.
// Errors: INVALID_ARGUMENT naming the count that does not fit.
absl::Status ReadStepRequest(const char* area, size_t bytes,
                             v1::PackedOperations* packed);

// The reply to a Step, as one buffer (header and columns): the whole
// Step's refusal when !status.ok(), else `response`'s packed results.
// `out` is replaced (its capacity reused).
void EncodeReply(const absl::Status& status, const v1::StepResponse& response,
                 std::string* out);

// Parses a whole reply (`reply`, total_bytes long) into `response`
// (replaced) and the whole Step's status (returned). A reply that does not
// follow the layout is INTERNAL (a daemon's answer is checked, not
// trusted).
absl::Status DecodeReply(std::string_view reply, v1::StepResponse* response);

// The control block's word at `offset` (see control::), as an atomic.
// REQUIRES: `base` is the mapping's start.
inline std::atomic_ref<uint32_t> Word(char* base, size_t offset) {
  return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(base + offset));
}
inline std::atomic_ref<uint64_t> Word64(char* base, size_t offset) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(base + offset));
}

// The control block's word at `offset`, as a pointer for the futex calls.
inline uint32_t* WordAddress(char* base, size_t offset) {
  return reinterpret_cast<uint32_t*>(base + offset);
}

// A spinning wait's pause between two looks at a word (the CPU's spin-wait
// hint, so the other hardware thread and the memory bus are spared).
inline void SpinPause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}
// Looks a spinning wait makes between two readings of the clock: reading it
// costs more than a look.
inline constexpr int kLooksPerClockRead = 64;

// FUTEX_WAIT (shared) on `word` while it holds `expected`, for at most
// `timeout`; returns when woken, on timeout, on a signal, or at once when it
// no longer holds `expected`: the caller looks again in every case.
void FutexWait(uint32_t* word, uint32_t expected, absl::Duration timeout);
// FUTEX_WAKE (shared): wakes every waiter on `word`.
void FutexWake(uint32_t* word);

}  // namespace statecache::step_channel

#endif  // STATECACHE_PROTO_STEP_CHANNEL_H_
