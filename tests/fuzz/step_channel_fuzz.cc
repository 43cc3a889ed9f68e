// libFuzzer target: a hostile client co-located with the daemon, on its step
// channel (daemon/channel/step_channels.h; the layout is proto/
// step_channel.h's). One StateCache with host state memory, its
// StepChannels, and two sessions: a victim, whose requests, slots and pin
// were made once at the start and whose slots' bytes were written then (as
// an engine's forward would), and an attacker, who has a channel. Each
// input is copied into the attacker's request area from its first byte (the
// rest of the area zeroed): the header, counts, columns and command are
// whatever the bytes say; it is published as a client publishes
// (request_seq + 1, a wake-up) and the harness waits for the reply, or for
// `closed` (kClose), as a client would, reading a reply in parts with
// kContinue. Then:
//  * the daemon answered in time and its reply follows the layout
//    (DecodeReply accepts it; its status is the header's; a Step's results
//    have one code per kind; a ping's is a bare header; kContinue without a
//    reply pending and unknown commands are refused);
//  * a refused request (and a ping) changed nothing a client or operator
//    can see (VisibleLessChannels in raw_step_channel.h);
//  * the daemon's invariants hold (CheckInvariants);
//  * nothing of the attacker's reached the victim: its requests, slots and
//    pin (its part of DebugDump), its session, and its slots' bytes are as
//    they were.
// The header's reserved words, which the daemon ignores, steer the harness:
// reserved[0] == kScribble makes reserved[1..8] four (offset, value) pairs
// written into the control block before publishing (the words the harness
// itself waits on excepted), and reserved[9] == kAbandon leaves a reply in
// parts unread after its first part, so that the next input's kContinue
// gets the rest (or its kStep drops it). Whenever the attacker holds
// anything, or its channel closed, it detaches and attaches anew with a new
// channel before the next input, so inputs start alike. tests/fuzz/
// step_channel_seeds/ (write_step_channel_seeds.py) starts it from every
// command and shape; the main build replays those seeds (replay_main.cc).
// STEP_CHANNEL_FUZZ_VERBOSE=1 prints what each input got.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/channel/step_channels.h"
#include "daemon/device/host_device.h"
#include "daemon/service/state_cache.h"
#include "proto/statecache/v1/statecache.pb.h"
#include "proto/step_channel.h"
#include "tests/service/fake_clock.h"
#include "tests/service/random_operations.h"
#include "tests/service/raw_step_channel.h"

namespace statecache {
namespace {

namespace sc = step_channel;

constexpr int64_t kSlots = 16;
// Enough operations a Step that a pass of refusals fills several reply
// areas.
constexpr int kMaxOps = 512;
constexpr size_t kArea = 4096;
// Far more than the daemon takes: only a daemon that never answers fails.
constexpr absl::Duration kPatience = absl::Seconds(20);
constexpr char kStatePrefix[] = "step_channel_fuzz_state";
constexpr char kChannelPrefix[] = "step_channel_fuzz";
// RequestHeader::reserved[0] and [9] values that steer the harness.
constexpr uint32_t kScribble = 0x53435249;  // "SCRI"
constexpr uint32_t kAbandon = 0x41424e44;   // "ABND"

void Check(bool ok, const char* what, const std::string& detail = "") {
  if (!ok) {
    std::fprintf(stderr, "step_channel_fuzz: %s\n%s\n", what, detail.c_str());
    std::abort();
  }
}

bool Verbose() {
  static const bool verbose = [] {
    const char* v = std::getenv("STEP_CHANNEL_FUZZ_VERBOSE");
    return v != nullptr && v[0] == '1';
  }();
  return verbose;
}

v1::StepResponse StepOrDie(StateCache& cache, const std::string& session,
                           const std::vector<v1::Operation>& ops) {
  v1::StepRequest req;
  req.set_session_id(session);
  for (const v1::Operation& op : ops) *req.add_operations() = op;
  v1::StepResponse resp;
  const absl::Status status = cache.Step(req, &resp);
  Check(status.ok(), "the victim's setup step was refused", status.ToString());
  for (const v1::OperationResult& r : resp.results()) {
    Check(r.code() == 0, "a victim's setup operation was refused",
          r.ShortDebugString());
  }
  return resp;
}

v1::Operation BeginPass() {
  v1::Operation op;
  op.mutable_begin_pass();
  return op;
}
v1::Operation Admit(const std::string& id, int32_t width, int64_t tokens,
                    int64_t anchor, std::vector<int64_t> hashes,
                    int32_t kv_hit) {
  v1::Operation op;
  v1::Admit* a = op.mutable_admit();
  a->set_request_id(id);
  a->set_width(width);
  a->set_num_tokens(tokens);
  a->set_anchor_pos(anchor);
  for (int64_t h : hashes) a->add_block_hashes(h);
  a->set_kv_hit_blocks(kv_hit);
  return op;
}
v1::Operation Checkpoint(const std::string& id, int64_t blocks, int64_t hash) {
  v1::Operation op;
  v1::Checkpoint* c = op.mutable_checkpoint();
  c->set_request_id(id);
  c->set_boundary_blocks(blocks);
  c->set_hash(hash);
  return op;
}
v1::Operation Release(const std::string& id) {
  v1::Operation op;
  op.mutable_release()->set_request_id(id);
  return op;
}

// The victim's part of DebugDump: its requests (slots, fork sources,
// reservations), pins and pending moves.
std::string SessionBlock(const std::string& dump, const std::string& id) {
  const std::string head = absl::StrCat("session ", id, "\n");
  const size_t at = dump.find(head);
  if (at == std::string::npos) return "";
  size_t end = at + head.size();
  while (end < dump.size() && dump.compare(end, 2, "  ") == 0) {
    const size_t line_end = dump.find('\n', end);
    end = line_end == std::string::npos ? dump.size() : line_end + 1;
  }
  return dump.substr(at, end - at);
}

class World {
 public:
  World() {
    (void)HostDevice::CleanupStale(kStatePrefix);
    (void)StepChannels::CleanupStale(kChannelPrefix);
    HostDeviceOptions device_options;
    device_options.layout = *StateLayout::Create(
        "fuzz", {{"conv", {3, 8}, DType::kBF16}, {"ssm", {2, 4}, DType::kF32}},
        2);
    device_options.num_slots = kSlots;
    device_options.max_slots = kSlots;
    device_options.epoch = NewEpoch(absl::Now());
    device_options.prefix = kStatePrefix;
    absl::StatusOr<std::unique_ptr<HostDevice>> device =
        HostDevice::Create(device_options);
    Check(device.ok(), "no state memory", device.status().ToString());
    memory_ = device->get();
    StateCacheOptions options;
    options.identity = TestIdentity("fuzz/model");
    options.num_slots = kSlots;
    options.max_slots = kSlots;
    options.transfer = *StateTransfer::Create(TransferKind::kFork, 1, true);
    options.lease_ttl = absl::Seconds(10);  // on the fake clock: never
    options.max_operations_per_step = kMaxOps;
    options.epoch = 9;
    options.clock = &clock_;
    options.device = std::move(*device);
    absl::StatusOr<std::unique_ptr<StateCache>> cache =
        StateCache::Create(std::move(options));
    Check(cache.ok(), "no cache", cache.status().ToString());
    cache_ = std::move(*cache);
    StepChannelOptions channel_options;
    channel_options.max_channels = 4096;  // ended ones linger a heartbeat
    channel_options.request_area_bytes = kArea;
    channel_options.reply_area_bytes = kArea;
    channel_options.heartbeat = absl::Milliseconds(5);
    channel_options.shm_prefix = kChannelPrefix;
    Check(StepChannels::ValidateOptions(channel_options).ok(), "bad options");
    channels_ =
        std::make_unique<StepChannels>(cache_.get(), channel_options, nullptr);

    // The victim: a checkpoint at hash 4 (its own, filed for everyone),
    // then v0 resuming from it (the checkpoint pinned as v0's fork
    // source, not yet consumed) and v1 cold.
    victim_ = Attach();
    StepOrDie(*cache_, victim_,
              {BeginPass(), Admit("c", 1, 128, 0, {3, 4}, 0),
               Checkpoint("c", 2, 4), Release("c")});
    const v1::StepResponse resumed =
        StepOrDie(*cache_, victim_,
                  {BeginPass(), Admit("v0", 2, 200, 128, {3, 4}, 2),
                   Admit("v1", 1, 64, 0, {}, 0)});
    Check(resumed.results(1).admit().fork_src() >= 0,
          "the victim's v0 did not resume", resumed.ShortDebugString());
    // Its slots (held, and the pinned source) hold an engine's writes.
    const PoolSnapshot pool = cache_->DumpPool();
    std::vector<int64_t> victim_slots;
    for (int i = 1; i <= 2; ++i) {
      for (int64_t slot : resumed.results(i).admit().slots()) {
        victim_slots.push_back(slot);
      }
    }
    victim_slots.push_back(resumed.results(1).admit().fork_src());
    const uint64_t bytes = memory_->layout().bytes_per_slot();
    for (int64_t slot : victim_slots) {
      char* at = memory_->base() + slot * bytes;
      for (uint64_t i = 0; i < bytes; ++i) {
        at[i] = static_cast<char>(0x5a ^ (slot * 131 + i * 7));
      }
      victim_bytes_.emplace_back(slot, std::string(at, bytes));
    }
    victim_view_ = VictimView();
    Check(victim_view_.find("pin ") != std::string::npos,
          "the victim holds no pin", victim_view_);
    NewAttacker();
  }

  ~World() {
    channel_.reset();
    channels_.reset();  // joins the channels' threads before the cache goes
  }

  StateCache& cache() { return *cache_; }
  RawStepChannel& channel() { return *channel_; }

  // A new attacker session and channel when the last one holds anything
  // or its channel closed: every input starts alike.
  void Refresh() {
    if (channel_ == nullptr || channel_->closed()) {
      NewAttacker();
      return;
    }
    v1::ListSessionsRequest list;
    list.set_page_size(100);
    v1::ListSessionsResponse sessions;
    Check(cache_->ListSessions(list, &sessions).ok(), "ListSessions refused");
    for (const v1::SessionInfo& s : sessions.sessions()) {
      if (s.handle() == attacker_handle_ &&
          (s.requests() > 0 || s.pins() > 0)) {
        NewAttacker();
        return;
      }
    }
  }

  // What the victim has and holds now.
  std::string VictimView() {
    v1::ListSessionsRequest list;
    list.set_page_size(100);
    v1::ListSessionsResponse sessions;
    Check(cache_->ListSessions(list, &sessions).ok(), "ListSessions refused");
    std::string out;
    for (const v1::SessionInfo& s : sessions.sessions()) {
      if (s.handle() == victim_handle_) {
        absl::StrAppend(&out, s.handle(), " requests=", s.requests(),
                        " slots=", s.slots(), " pins=", s.pins(), "\n");
      }
    }
    absl::StrAppend(&out, SessionBlock(cache_->DebugDump(), victim_));
    return out;
  }

  void CheckVictim(const std::string& after) {
    Check(cache_->SessionAttached(victim_), "the victim's session ended",
          after);
    const std::string view = VictimView();
    Check(
        view == victim_view_, "the victim's requests, slots or pin changed",
        absl::StrCat("was:\n", victim_view_, "now:\n", view, "after: ", after));
    const uint64_t bytes = memory_->layout().bytes_per_slot();
    for (const auto& [slot, content] : victim_bytes_) {
      Check(std::memcmp(memory_->base() + slot * bytes, content.data(),
                        bytes) == 0,
            "a slot of the victim was written", absl::StrCat("slot ", slot));
    }
  }

  // The reply in parts still to be asked for (kAbandon), as the daemon sees
  // it: the reply's length and how much of it was sent.
  uint64_t pending_total = 0;
  uint64_t pending_sent = 0;

 private:
  std::string Attach() {
    v1::AttachRequest req;
    *req.mutable_identity() = TestIdentity("fuzz/model");
    v1::AttachResponse resp;
    const absl::Status status = cache_->Attach(req, &resp);
    Check(status.ok(), "attach refused", status.ToString());
    if (victim_handle_.empty()) {
      victim_handle_ = resp.handle();
    } else {
      attacker_handle_ = resp.handle();
    }
    return resp.session_id();
  }

  void NewAttacker() {
    channel_.reset();
    if (!attacker_.empty()) {
      v1::DetachRequest req;
      req.set_session_id(attacker_);
      v1::DetachResponse resp;
      (void)cache_->Detach(req, &resp);  // its channel closes on a heartbeat
    }
    attacker_ = Attach();
    v1::OpenStepChannelRequest req;
    req.set_session_id(attacker_);
    v1::OpenStepChannelResponse opened;
    const absl::Status status =
        channels_->Open(req, &opened, Peer::InProcess());
    Check(status.ok(), "OpenStepChannel refused", status.ToString());
    channel_ = RawStepChannel::Map(opened);
    Check(channel_ != nullptr, "the channel's object cannot be mapped");
    Check(
        channel_->request_bytes() == kArea && channel_->reply_bytes() == kArea,
        "the areas are not the options'");
    pending_total = pending_sent = 0;
  }

  FakeClock clock_;
  HostDevice* memory_ = nullptr;  // the cache's
  std::unique_ptr<StateCache> cache_;
  std::unique_ptr<StepChannels> channels_;
  std::string victim_, victim_handle_;
  std::string attacker_, attacker_handle_;
  std::unique_ptr<RawStepChannel> channel_;
  std::string victim_view_;
  std::vector<std::pair<int64_t, std::string>> victim_bytes_;
};

World& TheWorld() {
  // Destroyed at exit (the replay's, or libFuzzer's), removing its objects.
  static World world;
  return world;
}

// Whether a kStep request's counts fit the area, by the contract: the
// header, then args, hashes, kinds, request_id_lengths and request_ids,
// each at the next multiple of 8.
bool Fits(const sc::RequestHeader& h) {
  uint64_t at = sc::kHeaderBytes;
  const uint64_t columns[][2] = {{h.args, 8},
                                 {h.hashes, 8},
                                 {h.kinds, 4},
                                 {h.request_id_lengths, 4},
                                 {h.request_ids, 1}};
  for (const auto& [count, width] : columns) {
    at = sc::Align8(at) + count * width;
  }
  return at <= kArea;
}

// Writes the scribbles reserved[1..8] ask for into the control block: four
// (offset, value) pairs, each offset a word of the block, the words the
// harness waits on excepted (closed, request_seq, reply_seq).
void Scribble(const sc::RequestHeader& header, RawStepChannel& channel) {
  for (int pair = 0; pair < 4; ++pair) {
    const size_t offset = (header.reserved[1 + 2 * pair] % 64) * 4;
    const uint32_t value = header.reserved[2 + 2 * pair];
    if (offset == sc::control::kClosed || offset == sc::control::kRequestSeq ||
        offset == sc::control::kReplySeq) {
      continue;
    }
    std::memcpy(channel.base() + offset, &value, sizeof(value));
  }
}

}  // namespace
}  // namespace statecache

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace statecache;
  World& world = TheWorld();
  world.Refresh();
  StateCache& cache = world.cache();
  RawStepChannel& channel = world.channel();

  char* area = channel.request_area();
  const size_t n = std::min(size, kArea);
  if (n > 0) std::memcpy(area, data, n);
  std::memset(area + n, 0, kArea - n);
  sc::RequestHeader header;
  std::memcpy(&header, area, sizeof(header));
  const std::string before = VisibleLessChannels(cache);
  if (header.reserved[0] == kScribble) Scribble(header, channel);

  const uint32_t seq = channel.Publish();
  const RawStepChannel::Answer answer = channel.Wait(seq, kPatience);
  Check(answer != RawStepChannel::Answer::kTimedOut,
        "the daemon did not answer in time");
  const std::string what = absl::StrCat("command ", header.command);
  bool changed_nothing = true;  // what a refusal (or a ping) must leave
  if (header.command == sc::kClose) {
    Check(answer == RawStepChannel::Answer::kClosed, "kClose was answered");
  } else {
    Check(answer == RawStepChannel::Answer::kReplied,
          "the daemon closed the channel on a request other than kClose", what);
    const bool continued = header.command == sc::kContinue &&
                           world.pending_sent < world.pending_total;
    if (continued) {
      // The next part of the reply left unread; nothing to decode.
      world.pending_sent +=
          std::min<uint64_t>(world.pending_total - world.pending_sent, kArea);
      if (Verbose()) {
        std::fprintf(stderr, "%s: a part, %llu of %llu bytes sent\n",
                     what.c_str(),
                     static_cast<unsigned long long>(world.pending_sent),
                     static_cast<unsigned long long>(world.pending_total));
      }
    } else {
      world.pending_total = world.pending_sent = 0;
      const sc::ReplyHeader reply_header = channel.reply_header();
      if (header.reserved[9] == kAbandon && reply_header.total_bytes > kArea) {
        world.pending_total = reply_header.total_bytes;
        world.pending_sent = kArea;
        changed_nothing = false;  // unread: it may have run
        if (Verbose()) {
          std::fprintf(stderr, "%s: left in parts, %llu bytes\n", what.c_str(),
                       static_cast<unsigned long long>(world.pending_total));
        }
      } else {
        const std::string reply = channel.ReadReply(kPatience);
        Check(!reply.empty(), "a reply of a bad length or not all answered",
              what);
        v1::StepResponse resp;
        const absl::Status status = sc::DecodeReply(reply, &resp);
        Check(static_cast<uint32_t>(status.code()) == reply_header.status,
              "a reply that does not follow the layout",
              absl::StrCat(what, ": ", status.ToString()));
        if (Verbose()) {
          std::string codes;
          for (int i = 0; i < resp.packed_results().codes_size(); ++i) {
            if (i == 16) {
              absl::StrAppend(&codes, "...");
              break;
            }
            absl::StrAppend(&codes, resp.packed_results().codes(i), " ");
          }
          std::fprintf(stderr, "%s: %s, %zu bytes, codes [%s]\n", what.c_str(),
                       status.ToString().c_str(), reply.size(), codes.c_str());
        }
        switch (header.command) {
          case sc::kStep:
            // Counts past the area are the channel's refusal, before Step.
            Check(
                Fits(header) != absl::StrContains(status.message(), "overrun"),
                Fits(header) ? "a request that fits was refused as an overrun"
                             : "a request overrunning the area was read",
                status.ToString());
            if (status.ok()) {
              Check(resp.packed_results().codes_size() ==
                        static_cast<int>(header.kinds),
                    "a Step's results are not one per kind");
              int refused = 0;
              for (uint32_t code : resp.packed_results().codes()) {
                refused += code != 0;
              }
              Check(resp.packed_results().messages_size() == refused,
                    "a Step's messages are not one per refusal");
              Check(resp.epoch() == 9, "a Step's epoch is not the daemon's");
              changed_nothing = false;
            } else {
              Check(absl::IsInvalidArgument(status),
                    "a Step refused other than for its arguments",
                    status.ToString());
            }
            break;
          case sc::kPing:
            Check(status.ok() && reply.size() == sc::kHeaderBytes,
                  "a ping's reply is not a bare OK header");
            break;
          case sc::kContinue:
            Check(absl::IsFailedPrecondition(status),
                  "kContinue with nothing pending was not refused",
                  status.ToString());
            break;
          default:
            Check(absl::IsInvalidArgument(status),
                  "an unknown command was not refused", status.ToString());
            break;
        }
      }
    }
  }
  if (changed_nothing) {
    const std::string after = VisibleLessChannels(cache);
    Check(after == before, "a refused request changed the daemon",
          absl::StrCat(what, "\nbefore: ", before, "\nafter: ", after));
  }
  const absl::Status invariants = cache.CheckInvariants();
  Check(invariants.ok(), "invariants broken",
        absl::StrCat(invariants.ToString(), "\nafter ", what));
  world.CheckVictim(what);
  return 0;
}
