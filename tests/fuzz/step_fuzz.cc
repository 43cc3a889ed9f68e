// libFuzzer target: arbitrary Steps, from two sessions and strangers, on a
// small StateCache (the daemon's core, slot decisions only), in the three
// shapes a client can send: a message's raw bytes, operations as a list, and
// the packed form, its columns sometimes cut short or bent; between steps,
// leases lapse, sessions detach or are evicted and the pool is resized.
// After every call the daemon's invariants hold (the pool's own, and the
// sessions' pins and slots agree with it); a step refused whole has changed
// nothing (not what a client or operator can see, nor the pool's whole dump
// or any session's requests: Visible in random_operations.h); and neither
// has a one-operation step whose operation was refused, nor a resize refused
// on the spot. The state memory is a FaultInjectingDevice over a device that
// holds no bytes but refuses (aborts on) any copy its contract refuses, so
// copies, snapshots and relocations run, and between steps the input may
// make copies or growth fail: the invariants hold through every failure, a
// snapshot refused for a failed copy changed nothing but the checkpoint it
// spent, and a grow the memory refused changed nothing. tests/fuzz/
// step_seeds/ (write_step_seeds.py) starts it from every operation kind and
// action; the main build replays those seeds (replay_main.cc).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/device/copy_plan.h"
#include "daemon/device/fault_injecting_device.h"
#include "daemon/service/state_cache.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/packed_form.h"
#include "proto/statecache/v1/statecache.pb.h"
#include "tests/device/heap_staging.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/service/fake_clock.h"
#include "tests/service/random_operations.h"

namespace statecache {
namespace {

void Check(bool ok, const char* what, const std::string& detail = "") {
  if (!ok) {
    std::fprintf(stderr, "step_fuzz: %s\n%s\n", what, detail.c_str());
    std::abort();
  }
}

void CheckInvariants(const StateCache& cache, const std::string& after) {
  const absl::Status invariants = cache.CheckInvariants();
  Check(invariants.ok(), "invariants broken",
        invariants.ToString() + "\nafter: " + after);
}

// State memory of a few bytes a slot: Copy, ReadSlots and WriteSlots check
// their batches as every backend does (BuildCopyTable, BuildImageCopyTable;
// a refusal is the daemon's bug, not the input's) and then move the bytes,
// so checksums and warm restarts have real content to vouch for.
class CheckingDevice : public Device {
 public:
  explicit CheckingDevice(int64_t num_slots)
      : layout_(*StateLayout::Create("fuzz", {{"s", {4}, DType::kF32}}, 1)),
        num_slots_(num_slots),
        bytes_(layout_.RegionBytes(num_slots)) {}

  // What an engine's forward does to a slot it holds.
  void Write(int64_t slot, uint64_t value) {
    char* at = bytes_.data() + slot * layout_.bytes_per_slot();
    for (uint64_t i = 0; i < layout_.bytes_per_slot(); ++i) {
      at[i] = static_cast<char>(value >> (8 * (i % 8)));
    }
  }

  std::string_view backend() const override { return "host"; }
  const StateLayout& layout() const override { return layout_; }
  int64_t num_slots() const override { return num_slots_; }
  int64_t max_slots() const override { return kMaxLayoutSlots; }
  absl::Status Resize(int64_t new_num_slots) override {
    Check(new_num_slots >= 0 && new_num_slots <= kMaxLayoutSlots,
          "resize out of range");
    num_slots_ = new_num_slots;
    bytes_.resize(layout_.RegionBytes(new_num_slots));
    return absl::OkStatus();
  }
  RegionExport Export() const override {
    RegionExport out;
    out.backend = "host";
    out.num_slots = num_slots_;
    out.capacity_slots = num_slots_;
    out.layout = layout_;
    return out;
  }
  absl::StatusOr<CopyResult> Copy(absl::Span<const SlotPair> pairs) override {
    const absl::Time start = absl::Now();
    absl::StatusOr<CopyTable> table =
        BuildCopyTable(layout_, num_slots_, num_slots_, pairs);
    Check(table.ok(), "the daemon asked for a copy no device accepts",
          table.status().ToString());
    // Sources first: the table's order is no order.
    std::vector<std::vector<char>> read;
    for (const CopyDescriptor& d : table->descriptors) {
      read.emplace_back(bytes_.begin() + d.src_offset,
                        bytes_.begin() + d.src_offset + d.bytes);
    }
    for (size_t i = 0; i < read.size(); ++i) {
      std::copy(read[i].begin(), read[i].end(),
                bytes_.begin() + table->descriptors[i].dst_offset);
    }
    return CopyResult::Of(*table, start);
  }
  absl::StatusOr<std::unique_ptr<HostStaging>> AllocateStaging(
      uint64_t bytes) override {
    Check(bytes > 0, "staging memory of 0 bytes");
    return std::make_unique<HeapStaging>(bytes);
  }
  absl::StatusOr<CopyResult> ReadSlots(
      HostStaging& staging, absl::Span<const SlotImage> images) override {
    return CheckImages(staging, images, /*to_region=*/false);
  }
  absl::StatusOr<CopyResult> WriteSlots(
      const HostStaging& staging, absl::Span<const SlotImage> images) override {
    return CheckImages(staging, images, /*to_region=*/true);
  }
  uint64_t CommittedBytes() const override {
    return layout_.RegionBytes(num_slots_);
  }

 private:
  CopyResult CheckImages(const HostStaging& staging,
                         absl::Span<const SlotImage> images, bool to_region) {
    const absl::Time start = absl::Now();
    absl::StatusOr<CopyTable> table = BuildImageCopyTable(
        layout_, num_slots_, num_slots_, staging.size(), images, to_region);
    Check(table.ok(),
          "the daemon asked for a slot image copy no device accepts",
          table.status().ToString());
    for (const CopyDescriptor& d : table->descriptors) {
      if (to_region) {
        std::memcpy(bytes_.data() + d.dst_offset, staging.data() + d.src_offset,
                    d.bytes);
      } else {
        std::memcpy(staging.data() + d.dst_offset, bytes_.data() + d.src_offset,
                    d.bytes);
      }
    }
    return CopyResult::Of(*table, start);
  }

  StateLayout layout_;
  int64_t num_slots_;
  std::vector<char> bytes_;
};

// With checksums on: an engine writes every slot it holds (not free, not
// pinned) after each Step, and every checkpoint the daemon would save still
// matches the checksum taken when it was published.
void EngineWritesAndCheckpointsHold(StateCache& cache, CheckingDevice& memory,
                                    uint64_t step, const std::string& after) {
  const PoolSnapshot pool = cache.DumpPool();
  std::vector<bool> untouched(pool.num_slots, false);
  for (int64_t slot : pool.free) untouched[slot] = true;
  for (const auto& [slot, count] : pool.pinned) untouched[slot] = true;
  for (int64_t slot = 0; slot < pool.num_slots; ++slot) {
    if (!untouched[slot]) memory.Write(slot, step * 1000003 + slot);
  }
  absl::StatusOr<StateCache::Checkpoints> saved = cache.SaveCheckpoints();
  if (!saved.ok()) return;
  std::vector<SlotMemory::SavedCheckpoint> checked = saved->saved.device;
  if (!cache.ReadCheckpointImages(checked).ok()) return;
  Check(checked.size() == saved->saved.device.size(),
        "a checkpoint's bytes changed after it was published", after);
}

// The warm restart at the end of a run: what the cache would save comes back
// in a fresh cache in the same order, marks and checksums, nothing dropped.
void CheckWarmRestart(StateCache& cache, FaultInjectingDevice& device,
                      const StateCacheOptions& like) {
  device.ClearFaults();
  absl::StatusOr<StateCache::Checkpoints> saved = cache.SaveCheckpoints();
  Check(saved.ok(), "saving checkpoints failed", saved.status().ToString());
  std::vector<SlotMemory::SavedCheckpoint> device_saved = saved->saved.device;
  absl::StatusOr<std::unique_ptr<HostStaging>> images =
      cache.ReadCheckpointImages(device_saved);
  Check(images.ok(), "reading checkpoint images failed");
  Check(device_saved.size() == saved->saved.device.size(),
        "a saved checkpoint's bytes do not match its checksum");
  std::vector<SlotMemory::SavedCheckpoint> tier_saved = saved->saved.tier;
  const std::string tier_images = cache.CopyTierImages(tier_saved);
  Check(tier_saved.size() == saved->saved.tier.size(),
        "a tier image does not match its checksum");
  const uint64_t image_bytes = saved->region.layout.bytes_per_slot();
  std::vector<SlotMemory::RestoreImage> device_restore, tier_restore;
  for (size_t k = 0; k < device_saved.size(); ++k) {
    device_restore.push_back(
        {device_saved[k], (*images)->data() + k * image_bytes});
  }
  for (size_t k = 0; k < tier_saved.size(); ++k) {
    tier_restore.push_back(
        {tier_saved[k], tier_images.data() + k * image_bytes});
  }
  StateCacheOptions options = like;
  options.num_slots = saved->region.num_slots;
  options.max_slots = std::max(options.max_slots, options.num_slots);
  auto fresh_memory = std::make_shared<CheckingDevice>(options.num_slots);
  options.device = fresh_memory;
  absl::StatusOr<std::unique_ptr<StateCache>> fresh =
      StateCache::Create(std::move(options));
  Check(fresh.ok(), "a fresh cache refused", fresh.status().ToString());
  absl::StatusOr<SlotMemory::RestoreCounts> counts =
      (*fresh)->RestoreCheckpoints(device_restore, tier_restore);
  Check(counts.ok(), "restore failed", counts.status().ToString());
  Check(counts->bad_checksum == 0 && counts->duplicate == 0 &&
            counts->no_room == 0 &&
            counts->device == static_cast<int64_t>(device_saved.size()),
        "restore dropped checkpoints it was given intact");
  CheckInvariants(**fresh, "a warm restart");
  absl::StatusOr<StateCache::Checkpoints> again = (*fresh)->SaveCheckpoints();
  Check(again.ok(), "saving the restored checkpoints failed");
  Check(again->saved.device.size() == device_saved.size(),
        "restored checkpoints are not all saved again");
  for (size_t k = 0; k < device_saved.size(); ++k) {
    const SlotMemory::SavedCheckpoint& a = device_saved[k];
    const SlotMemory::SavedCheckpoint& b = again->saved.device[k];
    Check(a.hash == b.hash && a.speculative == b.speculative &&
              a.checksum == b.checksum && b.location == static_cast<int64_t>(k),
          "a restored checkpoint lost its order, mark or bytes");
  }
}

// Between steps: the next copies, copies touching a slot, or growth fail, or
// the faults are cleared.
void ArmFault(FuzzInput& in, FaultInjectingDevice& device) {
  const uint8_t kind = in.Byte() % 4;
  const uint8_t arg = in.Byte();
  switch (kind) {
    case 0:
      device.FailNthCopy(1 + (arg & 3) % 3, absl::InternalError("fuzz fault"),
                         /*forward=*/(arg & 4) != 0);
      break;
    case 1:
      device.FailCopiesTouching(arg % 32);
      break;
    case 2:
      device.FailGrowth();
      break;
    default:
      device.ClearFaults();
      break;
  }
}

std::string Attach(StateCache& cache) {
  v1::AttachRequest req;
  *req.mutable_identity() = TestIdentity("fuzz/model");
  v1::AttachResponse resp;
  Check(cache.Attach(req, &resp).ok(), "attach refused");
  return resp.session_id();
}

// Bends one column of a packed step so that it no longer matches its kinds
// (or, sometimes, still does: a different kind with the same layout).
void Bend(FuzzInput& in, v1::PackedOperations* packed) {
  switch (in.Byte() % 6) {
    case 0:
      if (packed->kinds_size() > 0) {
        const int index = in.Byte() % packed->kinds_size();
        packed->set_kinds(index, in.Byte() % 18);
      }
      break;
    case 1:
      if (packed->args_size() > 0) packed->mutable_args()->RemoveLast();
      break;
    case 2:
      packed->add_args(static_cast<int64_t>(in.Word()) - 32768);
      break;
    case 3:
      if (packed->hashes_size() > 0) packed->mutable_hashes()->RemoveLast();
      break;
    case 4:
      if (packed->request_id_lengths_size() > 0) {
        const int index = in.Byte() % packed->request_id_lengths_size();
        packed->set_request_id_lengths(index, in.Byte());
      }
      break;
    case 5:
      packed->mutable_request_ids()->push_back('x');
      break;
  }
}

}  // namespace
}  // namespace statecache

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Raw bytes often carry invalid UTF-8 in a string field: a refusal the
  // fuzzer expects, not worth a line of protobuf's log each time.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace statecache;
  FuzzInput in(data, size);
  FakeClock clock;
  bool checksums = false;
  StateCacheOptions options;
  options.identity = TestIdentity("fuzz/model");
  options.num_slots = 1 + in.Byte() % 16;
  options.max_slots = 32;
  const uint8_t transfer = in.Byte() % 3;
  if (transfer == 0) {
    const int64_t fork_tokens = 1 + in.Byte() % 64;
    const bool readable_midstep = in.Byte() % 2;
    options.transfer = *StateTransfer::Create(TransferKind::kFork, fork_tokens,
                                              readable_midstep);
    // Half the fork runs keep a host tier of a few slot images (the
    // checking device's slots are 16 bytes); independently, half take
    // checksums and end with a warm restart.
    const uint8_t tier = in.Byte();
    if (tier % 2) options.host_tier_bytes = 16 * (1 + in.Byte() % 8);
    checksums = (tier >> 1) % 2;
  } else {
    options.transfer =
        transfer == 1 ? *StateTransfer::Create(TransferKind::kReplay, 0, false)
                      : StateTransfer::None();
  }
  options.lease_ttl = absl::Seconds(10);
  options.max_operations_per_step = 1 + in.Byte() % 12;
  options.epoch = 1;
  options.clock = &clock;
  auto memory = std::make_shared<CheckingDevice>(options.num_slots);
  auto device = std::make_shared<FaultInjectingDevice>(memory);
  options.device = device;
  StateCacheOptions like = options;
  like.device = nullptr;
  absl::StatusOr<std::unique_ptr<StateCache>> made =
      StateCache::Create(std::move(options));
  Check(made.ok(), "create refused", made.status().ToString());
  StateCache& cache = **made;
  if (checksums) {
    Check(cache.EnableChecksums().ok(), "checksums refused");
  }
  uint64_t steps = 0;
  std::string sessions[2] = {Attach(cache), Attach(cache)};
  Draw draw([&in] { return in.Word(); });

  while (!in.done()) {
    const std::string before = Visible(cache);
    v1::StepRequest req;
    bool one_op = false;
    const uint8_t action = in.Byte() % 16;
    if (action == 0) {
      // A message's raw bytes, as a client could send anything.
      if (!req.ParseFromString(std::string(in.Bytes(in.Byte())))) continue;
    } else if (action == 1) {
      // Between steps: time passes (leases lapse, a resize waits or runs out
      // of time), a session detaches or is evicted, an operator resizes, the
      // state memory starts or stops failing.
      const int k = in.Byte() % 2;
      switch (in.Byte() % 5) {
        case 0:
          clock.Advance(absl::Seconds(in.Byte() % 2 ? 11 : 3));
          cache.Tick();
          break;
        case 1: {
          v1::DetachRequest detach;
          detach.set_session_id(sessions[k]);
          v1::DetachResponse detached;
          (void)cache.Detach(detach, &detached);
          break;
        }
        case 2: {
          v1::EvictSessionRequest evict;
          evict.set_session_id(sessions[k]);
          v1::EvictSessionResponse evicted;
          (void)cache.EvictSession(evict, &evicted);
          break;
        }
        case 4:
          ArmFault(in, *device);
          break;
        default: {
          const int64_t grown_failed = device->counts().resizes_failed;
          v1::ResizeRequest resize;
          resize.set_target_slots(draw.Pick({-1, 0, 1, 2, 4, 8, 16, 32, 33}));
          resize.set_deadline_ms(draw.Pick({0, 0, 5000}));
          // `done` may run later (from a Step, a Tick, or the cache's end).
          auto refused = std::make_shared<bool>(false);
          cache.Resize(resize, [refused](absl::Status status,
                                         const v1::ResizeResponse&) {
            *refused =
                absl::IsInvalidArgument(status) || absl::IsAborted(status);
          });
          // Only growth is made to fail: the memory refused a grow.
          if (device->counts().resizes_failed > grown_failed) *refused = true;
          if (*refused) {
            Check(Visible(cache) == before,
                  "a refused resize changed the daemon",
                  resize.ShortDebugString());
          }
          break;
        }
      }
      CheckInvariants(cache, "a session end, resize or tick");
      for (std::string& s : sessions) {
        v1::KeepAliveRequest keepalive;
        keepalive.set_session_id(s);
        v1::KeepAliveResponse renewed;
        if (!cache.KeepAlive(keepalive, &renewed).ok()) s = Attach(cache);
      }
      continue;
    } else {
      // Drawn operations: one on its own, or a step's worth (sometimes one
      // too many), as a list or packed.
      one_op = action == 2;
      const int n = one_op ? 1 : in.Byte() % 14;
      for (int i = 0; i < n; ++i) draw.Operation(req.add_operations());
      if (in.Byte() % 2) {
        v1::PackedOperations packed;
        Check(PackOperations(req.operations(), &packed).ok(), "pack failed");
        req.clear_operations();
        *req.mutable_packed() = std::move(packed);
        if (in.Byte() % 4 == 0) Bend(in, req.mutable_packed());
      }
    }
    // Mostly one of the two sessions; otherwise a stranger (raw bytes keep
    // whatever session id they parsed to).
    const uint8_t who = in.Byte() % 8;
    if (who < 7) {
      req.set_session_id(sessions[who % 2]);
    } else if (action != 0) {
      req.set_session_id("no-such-session");
    }

    const int64_t copies_failed = device->counts().copies_failed;
    v1::GetStatsResponse stats_before;
    cache.GetStats(&stats_before);
    v1::StepResponse resp;
    const absl::Status status = cache.Step(req, &resp);
    CheckInvariants(cache, req.ShortDebugString());
    if (!status.ok()) {
      Check(Visible(cache) == before, "a step refused whole changed the daemon",
            req.ShortDebugString());
      continue;
    }
    int32_t code = 0;
    if (resp.results_size() > 0) code = resp.results(0).code();
    if (resp.packed_results().codes_size() > 0) {
      code = static_cast<int32_t>(resp.packed_results().codes(0));
    }
    if (one_op && code != 0) {
      // A snapshot whose copy failed may have spent the LRU head for its
      // destination (see SlotMemory::Snapshot): that alone may change.
      v1::GetStatsResponse stats_after;
      cache.GetStats(&stats_after);
      const bool spent = device->counts().copies_failed > copies_failed &&
                         stats_after.checkpoints_evicted() >
                             stats_before.checkpoints_evicted();
      if (!spent) {
        Check(Visible(cache) == before,
              "a refused operation changed the daemon", req.ShortDebugString());
      }
      Check(stats_after.checkpoints_kept() == stats_before.checkpoints_kept(),
            "a refused operation counted a checkpoint kept",
            req.ShortDebugString());
    }
    if (checksums) {
      EngineWritesAndCheckpointsHold(cache, *memory, ++steps,
                                     req.ShortDebugString());
    }
  }
  if (checksums) CheckWarmRestart(cache, *device, like);
  return 0;
}
