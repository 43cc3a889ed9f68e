#include "daemon/channel/step_channels.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/channel/mapping_guard.h"
#include "daemon/common/status_macros.h"
#include "daemon/device/shm_name.h"
#include "daemon/service/log.h"
#include "proto/step_channel.h"

namespace statecache {

namespace sc = step_channel;

// One channel: its mapping and the thread serving it.
class StepChannels::Channel {
 public:
  // Creates the object `name` and maps it; the thread starts with Start.
  static absl::StatusOr<std::unique_ptr<Channel>> Create(
      const std::string& name, const StepChannelOptions& options,
      const Peer& peer, std::string session_id, StateCache* cache,
      RpcObserver* observer);
  ~Channel();

  void Start() {
    thread_ = std::thread([this] { Serve(); });
  }
  // Asks the thread to end (it sets `closed` and wakes the client).
  void Close() {
    closing_.store(true);
    if (base_ != nullptr) {
      sc::FutexWake(sc::WordAddress(base_, sc::control::kRequestSeq));
    }
  }
  // The thread has ended.
  bool ended() const { return ended_.load(); }
  // No request arrived yet.
  bool waiting_for_first() const { return !first_seen_.load(); }
  absl::Time opened() const { return opened_; }
  const std::string& session() const { return session_; }
  const std::string& name() const { return name_; }
  uint64_t object_bytes() const { return bytes_; }

  void Beat() {
    if (!MappingGuard::Faulted(guard_)) {
      sc::Word64(base_, sc::control::kHeartbeat).fetch_add(1);
    }
  }

 private:
  Channel(std::string name, const StepChannelOptions& options, Peer peer,
          std::string session_id, StateCache* cache, RpcObserver* observer)
      : name_(std::move(name)),
        options_(options),
        peer_(std::move(peer)),
        session_(std::move(session_id)),
        cache_(cache),
        observer_(observer),
        opened_(absl::Now()) {}

  void Serve();
  // The next request_seq after `last`; `last` when the channel is closing.
  uint32_t WaitForRequest(uint32_t last);
  // Fills reply_ for the request in the request area.
  void Answer();
  // Copies the next part of reply_ into the reply area.
  void SendPart();
  void Unlink();
  bool faulted() const { return MappingGuard::Faulted(guard_); }

  const std::string name_;
  const StepChannelOptions options_;
  const Peer peer_;
  const std::string session_;
  StateCache* const cache_;
  RpcObserver* const observer_;
  const absl::Time opened_;

  char* base_ = nullptr;
  size_t bytes_ = 0;
  int guard_ = -1;
  std::atomic<bool> unlinked_{false};
  std::atomic<bool> closing_{false};
  std::atomic<bool> ended_{false};
  std::atomic<bool> first_seen_{false};
  std::thread thread_;

  // The serving thread's, reused across Steps.
  v1::StepRequest request_;
  v1::StepResponse response_;
  std::string reply_;
  size_t reply_sent_ = 0;
};

absl::StatusOr<std::unique_ptr<StepChannels::Channel>>
StepChannels::Channel::Create(const std::string& name,
                              const StepChannelOptions& options,
                              const Peer& peer, std::string session_id,
                              StateCache* cache, RpcObserver* observer) {
  std::unique_ptr<Channel> channel(
      new Channel(name, options, peer, std::move(session_id), cache, observer));
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC,
                            options.mode);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("shm_open(", name, "): ", std::strerror(errno)));
  }
  channel->bytes_ =
      sc::ObjectBytes(options.request_area_bytes, options.reply_area_bytes);
  // The umask must not narrow what the operator chose; a root daemon gives
  // the object to the peer's uid, so the mode need not open it to others.
  const bool give = ::geteuid() == 0 && peer.kind == Peer::Kind::kLocal;
  absl::Status made = absl::OkStatus();
  if (::fchmod(fd, options.mode) != 0 ||
      ((give || options.group != static_cast<gid_t>(-1)) &&
       ::fchown(fd, give ? peer.uid : static_cast<uid_t>(-1), options.group) !=
           0) ||
      ::ftruncate(fd, static_cast<off_t>(channel->bytes_)) != 0) {
    made = absl::InternalError(
        absl::StrCat("preparing ", name, ": ", std::strerror(errno)));
  } else {
    void* base = ::mmap(nullptr, channel->bytes_, PROT_READ | PROT_WRITE,
                        MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
      made = absl::InternalError(
          absl::StrCat("mmap ", name, ": ", std::strerror(errno)));
    } else {
      channel->base_ = static_cast<char*>(base);
    }
  }
  ::close(fd);
  if (made.ok()) {
    channel->guard_ = MappingGuard::Register(channel->base_, channel->bytes_);
    if (channel->guard_ < 0) {
      made = absl::ResourceExhaustedError("too many step channels mapped");
    }
  }
  if (!made.ok()) {
    channel->Unlink();
    return made;
  }
  char* b = channel->base_;
  std::memcpy(b + sc::control::kMagic, &sc::kMagic, sizeof(sc::kMagic));
  const uint32_t words[] = {sc::kVersion,
                            static_cast<uint32_t>(sc::kControlBytes)};
  std::memcpy(b + sc::control::kVersion, words, sizeof(words));
  const uint64_t areas[] = {sc::kControlBytes, options.request_area_bytes,
                            sc::kControlBytes + options.request_area_bytes,
                            options.reply_area_bytes};
  std::memcpy(b + sc::control::kRequestOffset, areas, sizeof(areas));
  const auto heartbeat_ms = static_cast<uint32_t>(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(options.heartbeat)));
  std::memcpy(b + sc::control::kHeartbeatMs, &heartbeat_ms,
              sizeof(heartbeat_ms));
  return channel;
}

StepChannels::Channel::~Channel() {
  Close();
  if (thread_.joinable()) thread_.join();
  Unlink();
  if (base_ != nullptr) {
    MappingGuard::Unregister(guard_);
    ::munmap(base_, bytes_);
  }
}

void StepChannels::Channel::Unlink() {
  if (!unlinked_.exchange(true)) ::shm_unlink(name_.c_str());
}

uint32_t StepChannels::Channel::WaitForRequest(uint32_t last) {
  std::atomic_ref<uint32_t> seq = sc::Word(base_, sc::control::kRequestSeq);
  std::atomic_ref<uint32_t> waiting =
      sc::Word(base_, sc::control::kDaemonWaiting);
  std::atomic_ref<uint32_t> expect = sc::Word(base_, sc::control::kExpectSeq);
  absl::Time spin_until = absl::Now() + options_.spin;
  for (int looks = 1;; ++looks) {
    if (closing_.load() || faulted()) return last;
    const uint32_t now = seq.load();
    if (now != last) return now;
    if (looks % sc::kLooksPerClockRead != 0 || absl::Now() < spin_until) {
      sc::SpinPause();
      continue;
    }
    // The client stores request_seq, then reads daemon_waiting; we store
    // daemon_waiting, then the kernel reads request_seq: one of us sees the
    // other (both seq_cst).
    waiting.store(1);
    if (seq.load() == last && !closing_.load() && expect.load() != last + 1) {
      sc::FutexWait(sc::WordAddress(base_, sc::control::kRequestSeq), last,
                    options_.heartbeat);
    }
    waiting.store(0);
    // Woken with the next pass announced: poll for it a while longer. The
    // announcement is spent once read, so it buys one window.
    if (expect.load() == last + 1) {
      expect.store(0);
      spin_until = absl::Now() + options_.expect_spin;
    }
  }
}

void StepChannels::Channel::Serve() {
  // request_seq starts at 0 (the object is made zero-filled), not at what
  // it holds when this thread starts: a client may publish its first
  // request as soon as Open returns, before this thread runs.
  uint32_t last = 0;
  for (;;) {
    const uint32_t seq = WaitForRequest(last);
    if (seq == last) break;  // closing, or the client broke the mapping
    last = seq;
    if (!first_seen_.exchange(true)) Unlink();
    uint32_t command = 0;
    std::memcpy(&command, base_ + sc::kControlBytes, sizeof(command));
    if (command == sc::kClose) break;
    if (command == sc::kContinue && reply_sent_ < reply_.size()) {
      SendPart();
    } else {
      Answer();
      reply_sent_ = 0;
      SendPart();
    }
    if (faulted()) break;
    sc::Word(base_, sc::control::kReplySeq).store(seq);
    if (sc::Word(base_, sc::control::kClientWaiting).load() != 0) {
      sc::FutexWake(sc::WordAddress(base_, sc::control::kReplySeq));
    }
  }
  if (faulted()) {
    LOG_WARNING(
        "step channel of session %s: its object was truncated under "
        "the daemon; channel closed",
        session_);
  } else {
    sc::Word(base_, sc::control::kClosed).store(1);
    sc::FutexWake(sc::WordAddress(base_, sc::control::kReplySeq));
  }
  ended_.store(true);
}

void StepChannels::Channel::Answer() {
  uint32_t command = 0;
  std::memcpy(&command, base_ + sc::kControlBytes, sizeof(command));
  response_.Clear();
  if (command == sc::kPing) {
    sc::EncodeReply(absl::OkStatus(), response_, &reply_);
    return;
  }
  const absl::Time start = absl::Now();
  absl::Status status;
  if (command == sc::kStep) {
    request_.set_session_id(session_);
    status = sc::ReadStepRequest(base_ + sc::kControlBytes,
                                 options_.request_area_bytes,
                                 request_.mutable_packed());
    if (status.ok()) status = cache_->Step(request_, &response_, peer_);
  } else if (command == sc::kContinue) {
    status = absl::FailedPreconditionError(
        "step channel: kContinue with no reply in parts pending");
  } else {
    status = absl::InvalidArgumentError(
        absl::StrCat("step channel: unknown command ", command));
  }
  sc::EncodeReply(status, response_, &reply_);
  if (observer_ != nullptr) {
    observer_->OnRpc(RpcMethod::kStepChannel, status.code(),
                     absl::ToDoubleSeconds(absl::Now() - start));
  }
}

void StepChannels::Channel::SendPart() {
  const size_t part =
      std::min(reply_.size() - reply_sent_, options_.reply_area_bytes);
  std::memcpy(base_ + sc::kControlBytes + options_.request_area_bytes,
              reply_.data() + reply_sent_, part);
  reply_sent_ += part;
}

// ------------------------------------------------------------ StepChannels

absl::Status StepChannels::ValidateOptions(const StepChannelOptions& options) {
  if (options.max_channels < 0 || options.max_channels > 4096) {
    return absl::InvalidArgumentError(
        "--max_step_channels must be in [0, 4096]");
  }
  for (size_t area : {options.request_area_bytes, options.reply_area_bytes}) {
    if (area < 4096 || area > (size_t{1} << 30) || area % 8 != 0) {
      return absl::InvalidArgumentError(
          "--step_channel_area_bytes must be a multiple of 8 in [4096, 1 GiB]");
    }
  }
  if (options.heartbeat < absl::Milliseconds(1) ||
      options.heartbeat > absl::Seconds(10)) {
    return absl::InvalidArgumentError(
        "the step channel heartbeat must be in [1ms, 10s]");
  }
  if (options.spin < absl::ZeroDuration() ||
      options.spin > absl::Milliseconds(10)) {
    return absl::InvalidArgumentError(
        "--step_channel_spin must be in [0, 10ms]");
  }
  if (options.expect_spin < absl::ZeroDuration() ||
      options.expect_spin > absl::Milliseconds(100)) {
    return absl::InvalidArgumentError(
        "--step_channel_expect_spin must be in [0, 100ms]");
  }
  if (options.first_request_timeout < absl::Milliseconds(1) ||
      options.first_request_timeout > absl::Hours(1)) {
    return absl::InvalidArgumentError(
        "the step channel's first-request timeout must be in [1ms, 1h]");
  }
  if (!ValidShmPrefix(options.shm_prefix)) {
    return absl::InvalidArgumentError("bad step channel shm prefix");
  }
  return absl::OkStatus();
}

absl::Status StepChannels::CleanupStale(const std::string& prefix) {
  return CleanupStaleShm(prefix).status();
}

StepChannels::StepChannels(StateCache* cache, StepChannelOptions options,
                           RpcObserver* observer)
    : cache_(cache), options_(std::move(options)), observer_(observer) {
  beat_ = std::thread([this] { Beat(); });
}

StepChannels::~StepChannels() {
  CloseAll();
  beat_.join();
}

absl::Status StepChannels::Open(const v1::OpenStepChannelRequest& request,
                                v1::OpenStepChannelResponse* response,
                                const Peer& peer) {
  if (options_.max_channels == 0) {
    return absl::FailedPreconditionError(
        "step channels are off on this daemon (--max_step_channels=0): use "
        "Step");
  }
  if (peer.kind != Peer::Kind::kLocal && peer.kind != Peer::Kind::kInProcess) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a step channel needs a peer on this host's Unix socket; this call "
        "came from ",
        peer.Describe(), ": use Step"));
  }
  RETURN_IF_ERROR(cache_->CheckSession(request.session_id(), peer));
  RETURN_IF_ERROR(MappingGuard::Install());
  std::string name;
  std::unique_ptr<Channel> ended;  // a closed one of this session, reaped
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::UnavailableError("the daemon is stopping");
    auto it = channels_.find(request.session_id());
    if (it != channels_.end() && !it->second->ended()) {
      return absl::AlreadyExistsError(
          "this session has a step channel open already");
    }
    int open = 0;
    for (const auto& [id, channel] : channels_) open += !channel->ended();
    if (open >= options_.max_channels) {
      // (An ended one of this session stays for Beat to reap and count.)
      return absl::ResourceExhaustedError(absl::StrCat(
          open, " step channels are open (--max_step_channels): use Step"));
    }
    if (it != channels_.end()) {
      ended = std::move(it->second);
      channels_.erase(it);
    }
    name = FormatShmName(options_.shm_prefix, next_name_++, CurrentShmOwner());
  }
  if (ended != nullptr) {
    ended.reset();
    cache_->CountStepChannel(false);
  }
  // Made outside the lock (a syscall or four); the slot is re-checked below.
  ASSIGN_OR_RETURN(std::unique_ptr<Channel> channel,
                   Channel::Create(name, options_, peer, request.session_id(),
                                   cache_, observer_));
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("the daemon is stopping");
  // Other Opens may have taken the last free slots meanwhile.
  int open = 0;
  for (const auto& [id, other] : channels_) open += !other->ended();
  if (open >= options_.max_channels) {
    return absl::ResourceExhaustedError(absl::StrCat(
        open, " step channels are open (--max_step_channels): use Step"));
  }
  auto [it, inserted] = channels_.try_emplace(request.session_id());
  if (!inserted) {
    return absl::AlreadyExistsError(
        "this session has a step channel open already");
  }
  response->set_shm_name(channel->name());
  response->set_object_bytes(channel->object_bytes());
  response->set_version(step_channel::kVersion);
  channel->Start();
  it->second = std::move(channel);
  cache_->CountStepChannel(true);
  return absl::OkStatus();
}

void StepChannels::CloseAll() {
  absl::flat_hash_map<std::string, std::unique_ptr<Channel>> ended;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    ended.swap(channels_);
  }
  for (auto& [id, channel] : ended) {
    channel.reset();
    cache_->CountStepChannel(false);
  }
}

int StepChannels::open() const {
  absl::MutexLock lock(&mu_);
  int open = 0;
  for (const auto& [id, channel] : channels_) open += !channel->ended();
  return open;
}

void StepChannels::Beat() {
  for (;;) {
    std::vector<std::unique_ptr<Channel>> ended;
    std::vector<std::string> sessions;
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                               options_.heartbeat)) {
        return;
      }
      for (auto& [id, channel] : channels_) sessions.push_back(id);
    }
    // Outside the lock: StateCache's own lock is taken here.
    std::vector<std::string> gone;
    for (const std::string& id : sessions) {
      if (!cache_->SessionAttached(id)) gone.push_back(id);
    }
    const absl::Time now = absl::Now();
    {
      absl::MutexLock lock(&mu_);
      for (const std::string& id : gone) {
        auto it = channels_.find(id);
        if (it != channels_.end()) it->second->Close();
      }
      for (auto it = channels_.begin(); it != channels_.end();) {
        Channel& channel = *it->second;
        if (channel.waiting_for_first() &&
            now - channel.opened() > options_.first_request_timeout) {
          channel.Close();
        }
        channel.Beat();
        if (channel.ended()) {
          ended.push_back(std::move(it->second));
          channels_.erase(it++);
        } else {
          ++it;
        }
      }
    }
    for (size_t i = 0; i < ended.size(); ++i) cache_->CountStepChannel(false);
    ended.clear();  // joins their threads, outside the lock
  }
}

}  // namespace statecache
