#include "client/step_channel_client.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "proto/status_mapping.h"
#include "proto/step_channel.h"

namespace statecache {
namespace {

namespace sc = step_channel;

// How long the client polls for a reply before it sleeps on the futex: a
// pass the daemon serves in tens of microseconds is cheaper to wait for
// awake than to be woken from.
constexpr absl::Duration kSpin = absl::Microseconds(200);

// Heartbeats the daemon may miss before the client calls it gone: generous,
// since a loaded machine can hold a thread off the CPU for a while.
constexpr int kMissedHeartbeats = 20;
constexpr absl::Duration kMinSilence = absl::Seconds(2);

}  // namespace

absl::StatusOr<std::unique_ptr<StepChannelClient>> StepChannelClient::Open(
    v1::StateCache::Stub& stub, const std::string& session_id,
    absl::Duration timeout) {
  v1::OpenStepChannelRequest request;
  request.set_session_id(session_id);
  v1::OpenStepChannelResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       absl::ToChronoMicroseconds(timeout));
  absl::Status status =
      FromGrpcStatus(stub.OpenStepChannel(&context, request, &response));
  if (!status.ok()) return status;
  return Map(response);
}

absl::StatusOr<std::unique_ptr<StepChannelClient>> StepChannelClient::Map(
    const v1::OpenStepChannelResponse& response) {
  if (response.version() != sc::kVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the daemon's step channel is version ", response.version(),
        "; this client speaks ", sc::kVersion));
  }
  const int fd = ::shm_open(response.shm_name().c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("shm_open(", response.shm_name(),
                                            "): ", std::strerror(errno)));
  }
  std::unique_ptr<StepChannelClient> channel(new StepChannelClient());
  channel->bytes_ = response.object_bytes();
  void* base = channel->bytes_ < sc::kControlBytes
                   ? MAP_FAILED
                   : ::mmap(nullptr, channel->bytes_, PROT_READ | PROT_WRITE,
                            MAP_SHARED, fd, 0);
  const int mmap_errno = errno;
  ::close(fd);
  if (base == MAP_FAILED) {
    return absl::InternalError(absl::StrCat("mapping ", response.shm_name(),
                                            ": ", std::strerror(mmap_errno)));
  }
  channel->base_ = static_cast<char*>(base);
  char* b = channel->base_;
  uint64_t magic = 0;
  uint64_t areas[4] = {};
  uint32_t heartbeat_ms = 0;
  std::memcpy(&magic, b + sc::control::kMagic, sizeof(magic));
  std::memcpy(areas, b + sc::control::kRequestOffset, sizeof(areas));
  std::memcpy(&heartbeat_ms, b + sc::control::kHeartbeatMs,
              sizeof(heartbeat_ms));
  const auto [request_offset, request_bytes, reply_offset, reply_bytes] =
      std::tuple(areas[0], areas[1], areas[2], areas[3]);
  if (magic != sc::kMagic || request_offset != sc::kControlBytes ||
      request_bytes < sc::kHeaderBytes || reply_bytes < sc::kHeaderBytes ||
      reply_offset != request_offset + request_bytes ||
      reply_offset + reply_bytes != channel->bytes_ || heartbeat_ms == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(response.shm_name(),
                     " is not a step channel this client "
                     "can use (its control block)"));
  }
  channel->request_area_ = b + request_offset;
  channel->request_bytes_ = request_bytes;
  channel->reply_area_ = b + reply_offset;
  channel->reply_bytes_ = reply_bytes;
  channel->heartbeat_ = absl::Milliseconds(heartbeat_ms);
  return channel;
}

StepChannelClient::~StepChannelClient() {
  if (base_ == nullptr) return;
  if (!closed()) {
    sc::WriteCommand(sc::kClose, request_area_);
    sc::Word(base_, sc::control::kRequestSeq).fetch_add(1);
    sc::FutexWake(sc::WordAddress(base_, sc::control::kRequestSeq));
  }
  ::munmap(base_, bytes_);
}

bool StepChannelClient::closed() const {
  return dead_ || sc::Word(base_, sc::control::kClosed).load() != 0;
}

absl::StatusOr<bool> StepChannelClient::WaitForReply(uint32_t seq) {
  std::atomic_ref<uint32_t> reply_seq = sc::Word(base_, sc::control::kReplySeq);
  std::atomic_ref<uint32_t> waiting =
      sc::Word(base_, sc::control::kClientWaiting);
  std::atomic_ref<uint64_t> heartbeat =
      sc::Word64(base_, sc::control::kHeartbeat);
  const absl::Time spin_until = absl::Now() + kSpin;
  const absl::Duration silence =
      std::max(kMinSilence, heartbeat_ * kMissedHeartbeats);
  uint64_t beat = heartbeat.load();
  absl::Time beat_seen = absl::Now();
  for (int looks = 1;; ++looks) {
    if (reply_seq.load() == seq) return true;
    if (sc::Word(base_, sc::control::kClosed).load() != 0) {
      // The daemon publishes a reply before it can close: look once more.
      return reply_seq.load() == seq;
    }
    if (looks % sc::kLooksPerClockRead != 0) {
      sc::SpinPause();
      continue;
    }
    const absl::Time now = absl::Now();
    if (now < spin_until) continue;
    if (const uint64_t b = heartbeat.load(); b != beat) {
      beat = b;
      beat_seen = now;
    } else if (now - beat_seen > silence) {
      dead_ = true;
      return absl::UnavailableError(
          absl::StrCat("the daemon stopped answering its step channel (no "
                       "heartbeat for ",
                       absl::FormatDuration(now - beat_seen),
                       "); the pass may or may not have run"));
    }
    // We store client_waiting, the kernel reads reply_seq; the daemon
    // stores reply_seq, then reads client_waiting (both seq_cst).
    waiting.store(1);
    if (const uint32_t at = reply_seq.load(); at != seq) {
      sc::FutexWait(sc::WordAddress(base_, sc::control::kReplySeq), at,
                    heartbeat_);
    }
    waiting.store(0);
  }
}

absl::StatusOr<StepChannelClient::Sent> StepChannelClient::RoundTrip() {
  reply_.clear();
  std::atomic_ref<uint32_t> request_seq =
      sc::Word(base_, sc::control::kRequestSeq);
  for (bool first = true;; first = false) {
    if (!first) sc::WriteCommand(sc::kContinue, request_area_);
    const uint32_t seq = request_seq.load() + 1;
    request_seq.store(seq);
    if (sc::Word(base_, sc::control::kDaemonWaiting).load() != 0) {
      sc::FutexWake(sc::WordAddress(base_, sc::control::kRequestSeq));
    }
    absl::StatusOr<bool> answered = WaitForReply(seq);
    if (!answered.ok()) return answered.status();
    if (!*answered) {
      if (first) return Sent::kNotSent;
      dead_ = true;
      return absl::UnavailableError(
          "the daemon closed the step channel in the middle of a reply");
    }
    sc::ReplyHeader header;
    if (first) {
      std::memcpy(&header, reply_area_, sizeof(header));
      if (header.total_bytes < sc::kHeaderBytes ||
          header.total_bytes > (uint64_t{1} << 40)) {
        dead_ = true;
        return absl::InternalError("step channel: a reply of a bad length");
      }
      reply_.reserve(header.total_bytes);
    } else {
      std::memcpy(&header, reply_.data(), sizeof(header));
    }
    const size_t part =
        std::min<size_t>(header.total_bytes - reply_.size(), reply_bytes_);
    reply_.append(reply_area_, part);
    if (reply_.size() == header.total_bytes) return Sent::kAnswered;
  }
}

absl::StatusOr<StepChannelClient::Sent> StepChannelClient::Step(
    const v1::PackedOperations& packed, v1::StepResponse* response) {
  if (closed()) return Sent::kNotSent;
  if (sc::WriteStepRequest(packed, request_area_, request_bytes_) == 0) {
    return Sent::kNotSent;
  }
  absl::StatusOr<Sent> sent = RoundTrip();
  if (!sent.ok() || *sent == Sent::kNotSent) return sent;
  absl::Status status = sc::DecodeReply(reply_, response);
  if (!status.ok()) return status;
  return Sent::kAnswered;
}

absl::Status StepChannelClient::Ping() {
  if (closed()) return absl::FailedPreconditionError("step channel closed");
  sc::WriteCommand(sc::kPing, request_area_);
  absl::StatusOr<Sent> sent = RoundTrip();
  if (!sent.ok()) return sent.status();
  if (*sent == Sent::kNotSent) {
    return absl::FailedPreconditionError("step channel closed");
  }
  v1::StepResponse response;
  return sc::DecodeReply(reply_, &response);
}

}  // namespace statecache
