// libFuzzer target: arbitrary call sequences on a small SlotPool, including
// every kind of bad argument. After each call the pool's invariants hold, and
// a refused call has left the pool exactly as it was.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>
#include <vector>

#include "daemon/core/slot_pool.h"
#include "tests/fuzz/fuzz_input.h"

namespace statecache {
namespace {

// The fuzzer's bytes as the pool's arguments.
class Input : public FuzzInput {
 public:
  using FuzzInput::FuzzInput;
  // A slot-like value: mostly in a small range around the pool, sometimes
  // negative or huge, so range checks are exercised.
  int64_t Slot() {
    const uint8_t b = Byte();
    if (b == 255) return int64_t{1} << 40;
    if (b == 254) return -7;
    return static_cast<int64_t>(b % 40) - 1;
  }
  int64_t Small() { return static_cast<int64_t>(Byte() % 12) - 1; }
  int64_t Hash() {
    const uint8_t b = Byte();
    return b == 255 ? -3 : b % 24;
  }
  Sequence Seq() {
    Sequence s;
    s.state_slot = Slot();
    s.num_tokens = Byte() * 16;
    s.has_per_req_cache = Byte() % 8 != 0;
    s.midstep_anchor_pos = (Byte() % 4) * 64;
    s.checkpoint_end_pos = (Byte() % 4) * 64;
    return s;
  }
};

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "pool_fuzz: %s\n", what);
    std::abort();
  }
}

}  // namespace
}  // namespace statecache

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace statecache;
  Input in(data, size);
  const uint8_t kind = in.Byte() % 3;
  const TransferKind tk = kind == 0   ? TransferKind::kFork
                          : kind == 1 ? TransferKind::kReplay
                                      : TransferKind::kNone;
  // Each value drawn in a statement of its own (fuzz_input.h says why).
  const int64_t fork_tokens =
      tk == TransferKind::kFork ? 1 + in.Byte() % 64 : 0;
  const bool readable_midstep = tk != TransferKind::kNone && in.Byte() % 2;
  auto transfer = StateTransfer::Create(tk, fork_tokens, readable_midstep);
  if (!transfer.ok()) return 0;
  const int64_t num_slots = in.Byte() % 33;
  const bool enabled = in.Byte() % 16 != 0;
  auto made = SlotPool::Create(num_slots, *transfer, 64, enabled);
  if (!made.ok()) return 0;
  SlotPool pool = std::move(*made);
  std::vector<Reservation> reserved;  // what reserve_midstep handed out
  while (!in.done()) {
    const PoolSnapshot before = pool.Dump();
    absl::Status status;
    switch (in.Byte() % 26) {
      case 0:
        status = pool.HasFree(in.Small()).status();
        break;
      case 1:
        status = pool.IsFree(in.Slot()).status();
        break;
      case 2:
        status = pool.Pop().status();
        break;
      case 3:
        status = pool.PopMany(in.Small()).status();
        break;
      case 4:
        status = pool.Claim(in.Slot());
        break;
      case 5:
        status = pool.MarkSpeculative(in.Slot());
        break;
      case 6:
        status = pool.Promote(in.Slot());
        break;
      case 7:
        status = pool.Release(in.Slot());
        break;
      case 8: {
        std::vector<int64_t> slots;
        for (int n = in.Byte() % 4; n > 0; --n) slots.push_back(in.Slot());
        status = pool.ReleaseMany(slots);
        break;
      }
      case 9:
        status = pool.Extend(in.Small());
        break;
      case 10:
        status = pool.RetireTop().status();
        break;
      case 11: {
        std::vector<int64_t> hashes;
        for (int n = in.Byte() % 5; n > 0; --n) hashes.push_back(in.Hash());
        const Sequence seq = in.Seq();
        const int64_t width = in.Small();
        const bool claim = in.Byte() % 2;
        status = pool.ResumableHit(seq, width, hashes, claim).status();
        break;
      }
      case 12:
        status = pool.Lookup(in.Hash()).status();
        break;
      case 13: {
        std::vector<std::pair<int64_t, int64_t>> positions;
        for (int n = in.Byte() % 3; n > 0; --n) {
          const int64_t position = (in.Byte() % 4) * 64;
          positions.emplace_back(position, in.Hash());
        }
        auto r = pool.ReserveMidstep(in.Seq(), positions);
        status = r.status();
        if (r.ok()) reserved.insert(reserved.end(), r->begin(), r->end());
        break;
      }
      case 14:
      case 15: {
        // Mostly real reservations, sometimes altered or duplicated.
        std::vector<Reservation> rs;
        for (int n = in.Byte() % 3; n > 0 && !reserved.empty(); --n) {
          Reservation r = reserved[in.Byte() % reserved.size()];
          const uint8_t twist = in.Byte() % 8;
          if (twist == 0) r.hash += 1;
          if (twist == 1) r.slot = in.Slot();
          rs.push_back(r);
        }
        if (in.Byte() % 2) {
          std::optional<Sequence> seq;
          if (in.Byte() % 2) seq = in.Seq();
          status = pool.PublishMidstep(rs, seq);
        } else {
          status = pool.CancelMidstep(rs);
        }
        break;
      }
      case 16: {
        const Sequence seq = in.Seq();
        const int64_t boundary = in.Small();
        status = pool.Checkpoint(seq, boundary, in.Hash()).status();
        break;
      }
      case 17: {
        const int64_t from = in.Slot();
        status = pool.RecordRelocation(from, in.Slot());
        break;
      }
      case 18:
        (void)pool.TakeRelocations();
        break;
      case 19:
        status = pool.Unindex(in.Hash());
        break;
      case 20:
        pool.ClearIndex();
        break;
      case 21:
        status = pool.Invalidate(in.Slot());
        break;
      case 22: {
        const int64_t slot = in.Slot();
        status = pool.Pin(slot, in.Byte() % 2);
        break;
      }
      case 23:
        status = pool.Unpin(in.Slot());
        break;
      case 24:
        status = pool.DropReader(in.Slot());
        break;
      case 25:
        if (in.Byte() % 2) {
          pool.ReleasePins();
        } else {
          const int64_t slot = in.Slot();
          status = pool.ReleasePin(slot, in.Small());
        }
        break;
    }
    Check(pool.CheckInvariants().ok(), "invariants broken");
    if (!status.ok())
      Check(pool.Dump() == before, "a refused call changed the pool");
  }
  return 0;
}
