#include "daemon/replay/trace.h"

#include <chrono>
#include <initializer_list>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "daemon/core/host_tier.h"
#include "nlohmann/json.hpp"

namespace statecache::replay {
namespace {

using nlohmann::json;

// Argument kinds, as the trace format's table names them.
enum class Arg {
  kCount,
  kSlot,
  kSlots,
  kHash,
  kSeq,
  kSeqOrNull,
  kHit,
  kBlockHashes,
  kAssumeCheckpointed,
  kPositions,
  kReservations,
  kBoundaryBlocks,
  kSrc,
  kDst,
  kReaderIsNextBatch,
};

const char* ArgName(Arg arg) {
  switch (arg) {
    case Arg::kCount:
      return "count";
    case Arg::kSlot:
      return "slot";
    case Arg::kSlots:
      return "slots";
    case Arg::kHash:
      return "hash";
    case Arg::kSeq:
      return "seq";
    case Arg::kSeqOrNull:
      return "seq";
    case Arg::kHit:
      return "hit";
    case Arg::kBlockHashes:
      return "block_hashes";
    case Arg::kAssumeCheckpointed:
      return "assume_checkpointed";
    case Arg::kPositions:
      return "positions";
    case Arg::kReservations:
      return "reservations";
    case Arg::kBoundaryBlocks:
      return "boundary_blocks";
    case Arg::kSrc:
      return "src";
    case Arg::kDst:
      return "dst";
    case Arg::kReaderIsNextBatch:
      return "reader_is_next_batch";
  }
  return "?";
}

struct OpSpec {
  Op op;
  std::vector<Arg> args;
};

const absl::flat_hash_map<std::string, OpSpec>& OpTable() {
  static const auto* table = new absl::flat_hash_map<std::string, OpSpec>{
      {"has_free", {Op::kHasFree, {Arg::kCount}}},
      {"num_free", {Op::kNumFree, {}}},
      {"is_free", {Op::kIsFree, {Arg::kSlot}}},
      {"holds_checkpoint", {Op::kHoldsCheckpoint, {Arg::kSlot}}},
      {"pop", {Op::kPop, {}}},
      {"pop_many", {Op::kPopMany, {Arg::kCount}}},
      {"claim", {Op::kClaim, {Arg::kSlot}}},
      {"mark_speculative", {Op::kMarkSpeculative, {Arg::kSlot}}},
      {"promote", {Op::kPromote, {Arg::kSlot}}},
      {"release", {Op::kRelease, {Arg::kSlot}}},
      {"release_many", {Op::kReleaseMany, {Arg::kSlots}}},
      {"extend", {Op::kExtend, {Arg::kCount}}},
      {"retire_top", {Op::kRetireTop, {}}},
      {"applies", {Op::kApplies, {Arg::kSeq}}},
      {"lookup", {Op::kLookup, {Arg::kHash}}},
      {"resumable_hit",
       {Op::kResumableHit,
        {Arg::kSeq, Arg::kHit, Arg::kBlockHashes, Arg::kAssumeCheckpointed}}},
      {"reserve_midstep", {Op::kReserveMidstep, {Arg::kSeq, Arg::kPositions}}},
      {"publish_midstep",
       {Op::kPublishMidstep, {Arg::kReservations, Arg::kSeqOrNull}}},
      {"cancel_midstep", {Op::kCancelMidstep, {Arg::kReservations}}},
      {"checkpoint",
       {Op::kCheckpoint, {Arg::kSeq, Arg::kBoundaryBlocks, Arg::kHash}}},
      {"checkpoint_fates", {Op::kCheckpointFates, {}}},
      {"occupancy", {Op::kOccupancy, {}}},
      {"record_relocation", {Op::kRecordRelocation, {Arg::kSrc, Arg::kDst}}},
      {"take_relocations", {Op::kTakeRelocations, {}}},
      {"unindex", {Op::kUnindex, {Arg::kHash}}},
      {"clear_index", {Op::kClearIndex, {}}},
      {"invalidate", {Op::kInvalidate, {Arg::kSlot}}},
      {"pin", {Op::kPin, {Arg::kSlot, Arg::kReaderIsNextBatch}}},
      {"is_pinned", {Op::kIsPinned, {Arg::kSlot}}},
      {"pin_count", {Op::kPinCount, {Arg::kSlot}}},
      {"unpin", {Op::kUnpin, {Arg::kSlot}}},
      {"drop_reader", {Op::kDropReader, {Arg::kSlot}}},
      {"release_pins", {Op::kReleasePins, {}}},
      {"dump", {Op::kDump, {}}},
  };
  return *table;
}

// Conversion failures carry the message the error line prints.
struct ParseError {
  std::string message;
};

int64_t ToInt(const json& v, absl::string_view what) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() >
            static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw ParseError{absl::StrCat(what, " does not fit in 64 bits")};
    }
    return v.get<int64_t>();
  }
  throw ParseError{absl::StrCat(what, " must be int")};
}

bool ToBool(const json& v, absl::string_view what) {
  if (!v.is_boolean()) throw ParseError{absl::StrCat(what, " must be bool")};
  return v.get<bool>();
}

std::vector<int64_t> ToInts(const json& v, absl::string_view what) {
  if (!v.is_array()) throw ParseError{absl::StrCat(what, " must be a list")};
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (const json& x : v) out.push_back(ToInt(x, what));
  return out;
}

std::vector<std::vector<int64_t>> ToTuples(const json& v, size_t n,
                                           absl::string_view what) {
  if (!v.is_array()) throw ParseError{absl::StrCat(what, " must be a list")};
  std::vector<std::vector<int64_t>> out;
  out.reserve(v.size());
  for (const json& item : v) {
    if (!item.is_array() || item.size() != n) {
      throw ParseError{absl::StrCat(what, " entries must be [", n, " ints]")};
    }
    out.push_back(ToInts(item, what));
  }
  return out;
}

Sequence ToSeq(const json& v) {
  static constexpr std::initializer_list<const char*> kFields = {
      "state_slot", "num_tokens", "has_per_req_cache", "midstep_anchor_pos",
      "checkpoint_end_pos"};
  if (!v.is_object()) throw ParseError{"seq must be an object"};
  bool exact = v.size() == kFields.size();
  for (const char* f : kFields) exact = exact && v.contains(f);
  if (!exact) {
    throw ParseError{
        "seq must have exactly the fields ['checkpoint_end_pos', "
        "'has_per_req_cache', 'midstep_anchor_pos', 'num_tokens', "
        "'state_slot']"};
  }
  Sequence seq;
  seq.state_slot = ToInt(v["state_slot"], "seq.state_slot");
  seq.num_tokens = ToInt(v["num_tokens"], "seq.num_tokens");
  seq.has_per_req_cache =
      ToBool(v["has_per_req_cache"], "seq.has_per_req_cache");
  seq.midstep_anchor_pos =
      ToInt(v["midstep_anchor_pos"], "seq.midstep_anchor_pos");
  seq.checkpoint_end_pos =
      ToInt(v["checkpoint_end_pos"], "seq.checkpoint_end_pos");
  return seq;
}

void ConvertArg(Arg arg, const json& v, Call& call) {
  const char* name = ArgName(arg);
  switch (arg) {
    case Arg::kCount:
    case Arg::kSlot:
    case Arg::kHit:
    case Arg::kBoundaryBlocks:
    case Arg::kSrc:
      call.a = ToInt(v, name);
      break;
    case Arg::kHash:
      // checkpoint carries boundary_blocks in `a`; its hash goes in `b`.
      (call.op == Op::kCheckpoint ? call.b : call.a) = ToInt(v, name);
      break;
    case Arg::kDst:
      call.b = ToInt(v, name);
      break;
    case Arg::kSlots:
    case Arg::kBlockHashes:
      call.ints = ToInts(v, name);
      break;
    case Arg::kSeq:
      call.seq = ToSeq(v);
      break;
    case Arg::kSeqOrNull:
      if (!v.is_null()) call.seq = ToSeq(v);
      break;
    case Arg::kAssumeCheckpointed:
    case Arg::kReaderIsNextBatch:
      call.flag = ToBool(v, name);
      break;
    case Arg::kPositions:
      for (const auto& t : ToTuples(v, 2, name))
        call.pairs.emplace_back(t[0], t[1]);
      break;
    case Arg::kReservations:
      for (const auto& t : ToTuples(v, 3, name)) {
        call.reservations.push_back(Reservation{t[0], t[1], t[2]});
      }
      break;
  }
}

PoolConfig ToConfig(const json& obj) {
  static constexpr std::initializer_list<const char*> kAllowed = {
      "op", "num_slots", "hash_block_size", "enabled", "transfer"};
  for (const auto& [key, unused] : obj.items()) {
    bool known = false;
    for (const char* k : kAllowed) known = known || key == k;
    if (!known)
      throw ParseError{absl::StrCat("unknown config key '", key, "'")};
  }
  PoolConfig config;
  if (!obj.contains("num_slots")) throw ParseError{"num_slots must be int"};
  config.num_slots = ToInt(obj["num_slots"], "num_slots");
  if (obj.contains("hash_block_size")) {
    config.hash_block_size = ToInt(obj["hash_block_size"], "hash_block_size");
  }
  if (obj.contains("enabled"))
    config.enabled = ToBool(obj["enabled"], "enabled");
  if (obj.contains("transfer") && !obj["transfer"].is_null()) {
    const json& t = obj["transfer"];
    if (!t.is_object()) throw ParseError{"transfer must be an object"};
    for (const auto& [key, unused] : t.items()) {
      if (key != "kind" && key != "fork_tokens" && key != "readable_midstep") {
        throw ParseError{absl::StrCat("unknown transfer key '", key, "'")};
      }
    }
    if (!t.contains("kind") || !t["kind"].is_string()) {
      throw ParseError{"transfer.kind must be str"};
    }
    auto kind = ParseTransferKind(t["kind"].get<std::string>());
    if (!kind.ok()) throw ParseError{std::string(kind.status().message())};
    config.kind = *kind;
    if (t.contains("fork_tokens")) {
      config.fork_tokens = ToInt(t["fork_tokens"], "transfer.fork_tokens");
    }
    if (t.contains("readable_midstep")) {
      config.readable_midstep =
          ToBool(t["readable_midstep"], "transfer.readable_midstep");
    }
  }
  return config;
}

json PairsJson(const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  json out = json::array();
  for (const auto& [x, y] : pairs) out.push_back(json::array({x, y}));
  return out;
}

json FatesJson(const CheckpointFates& f) {
  return json{{"checkpoints_kept", f.kept},
              {"checkpoints_dropped", f.dropped},
              {"checkpoints_evicted", f.evicted},
              {"checkpoints_orphaned", f.orphaned}};
}

json SnapshotJson(const PoolSnapshot& s) {
  json out = FatesJson(s.fates);
  out["num_slots"] = s.num_slots;
  out["free"] = s.free;
  out["checkpointed"] = s.checkpointed;
  out["speculative"] = s.speculative;
  out["hash_to_slot"] = PairsJson(s.hash_to_slot);
  out["slot_hash"] = s.slot_hash;
  out["pinned"] = PairsJson(s.pinned);
  out["deferred"] = s.deferred;
  out["relocations"] = PairsJson(s.relocations);
  return out;
}

struct ValueToJson {
  json operator()(std::monostate) const { return nullptr; }
  json operator()(bool b) const { return b; }
  json operator()(int64_t v) const { return v; }
  json operator()(const std::vector<int64_t>& v) const { return v; }
  json operator()(const std::optional<SlotRetirement>& r) const {
    if (!r) return nullptr;
    return json{{"retired", r->retired},
                {"relocated_to", r->relocated_to},
                {"held_checkpoint", r->held_checkpoint}};
  }
  json operator()(const CheckpointResult& r) const {
    return json{{"state_slot", r.state_slot},
                {"state_fork_src", r.state_fork_src}};
  }
  json operator()(const CheckpointFates& f) const { return FatesJson(f); }
  json operator()(const Occupancy& o) const {
    return json{{"slots_total", o.total},
                {"slots_used", o.used},
                {"slots_held", o.held},
                {"slots_vacant", o.vacant}};
  }
  json operator()(const std::vector<std::pair<int64_t, int64_t>>& p) const {
    return PairsJson(p);
  }
  json operator()(const std::vector<Reservation>& rs) const {
    json out = json::array();
    for (const Reservation& r : rs) {
      out.push_back(json::array({r.slot, r.position, r.hash}));
    }
    return out;
  }
  json operator()(const std::shared_ptr<const PoolSnapshot>& s) const {
    return SnapshotJson(*s);
  }
};

std::string Dumps(const json& j) {
  // nlohmann's objects are std::map: keys come out sorted, and a compact
  // dump uses "," and ":" exactly as the normalised reference output does.
  return j.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
}

template <typename T>
CallResult FromStatusOr(absl::StatusOr<T> s) {
  if (!s.ok()) return CallResult{s.status(), std::monostate{}};
  return CallResult{absl::OkStatus(), Value(std::move(*s))};
}

CallResult FromStatus(absl::Status s) {
  return CallResult{std::move(s), std::monostate{}};
}

}  // namespace

ParsedLine ParseLine(std::string_view line) {
  ParsedLine out;
  if (line.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    out.error = "blank line";
    return out;
  }
  json obj = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded()) {
    out.error = "line is not valid JSON";
    return out;
  }
  if (!obj.is_object() || !obj.contains("op") || !obj["op"].is_string()) {
    out.error = "a line must be an object with a string op";
    return out;
  }
  const std::string op = obj["op"].get<std::string>();
  try {
    if (op == "config") {
      out.config = ToConfig(obj);
      out.kind = ParsedLine::Kind::kConfig;
      return out;
    }
    auto it = OpTable().find(op);
    if (it == OpTable().end()) {
      out.error = absl::StrCat("unknown op '", op, "'");
      return out;
    }
    const OpSpec& spec = it->second;
    for (const auto& [key, unused] : obj.items()) {
      if (key == "op") continue;
      bool known = false;
      for (Arg a : spec.args) known = known || key == ArgName(a);
      if (!known) {
        throw ParseError{absl::StrCat("unknown argument '", key, "' for ", op)};
      }
    }
    out.call.op = spec.op;
    for (Arg a : spec.args) {
      if (!obj.contains(ArgName(a))) {
        throw ParseError{
            absl::StrCat(op, " needs argument '", ArgName(a), "'")};
      }
      ConvertArg(a, obj[ArgName(a)], out.call);
    }
    out.kind = ParsedLine::Kind::kCall;
  } catch (const ParseError& e) {
    out.error = e.message;
  }
  return out;
}

namespace {

// The table's entry for each op, by op.
const std::pair<std::string, const OpSpec*>& SpecOf(Op op) {
  static const auto* by_op = [] {
    auto* out = new std::vector<std::pair<std::string, const OpSpec*>>(
        static_cast<size_t>(Op::kDump) + 1);
    for (const auto& [name, spec] : OpTable()) {
      (*out)[static_cast<size_t>(spec.op)] = {name, &spec};
    }
    return out;
  }();
  return (*by_op)[static_cast<size_t>(op)];
}

json SeqJson(const Sequence& seq) {
  return json{{"state_slot", seq.state_slot},
              {"num_tokens", seq.num_tokens},
              {"has_per_req_cache", seq.has_per_req_cache},
              {"midstep_anchor_pos", seq.midstep_anchor_pos},
              {"checkpoint_end_pos", seq.checkpoint_end_pos}};
}

// ConvertArg's inverse.
json ArgJson(Arg arg, const Call& call) {
  switch (arg) {
    case Arg::kCount:
    case Arg::kSlot:
    case Arg::kHit:
    case Arg::kBoundaryBlocks:
    case Arg::kSrc:
      return call.a;
    case Arg::kHash:
      return call.op == Op::kCheckpoint ? call.b : call.a;
    case Arg::kDst:
      return call.b;
    case Arg::kSlots:
    case Arg::kBlockHashes:
      return call.ints;
    case Arg::kSeq:
      return SeqJson(call.seq.value_or(Sequence{}));
    case Arg::kSeqOrNull:
      return call.seq ? SeqJson(*call.seq) : json(nullptr);
    case Arg::kAssumeCheckpointed:
    case Arg::kReaderIsNextBatch:
      return call.flag;
    case Arg::kPositions:
      return PairsJson(call.pairs);
    case Arg::kReservations: {
      json out = json::array();
      for (const Reservation& r : call.reservations) {
        out.push_back(json::array({r.slot, r.position, r.hash}));
      }
      return out;
    }
  }
  return nullptr;
}

}  // namespace

std::string FormatConfig(const PoolConfig& config) {
  json transfer = nullptr;
  if (config.kind != TransferKind::kNone) {
    transfer = json{{"kind", std::string(TransferKindName(config.kind))},
                    {"fork_tokens", config.fork_tokens},
                    {"readable_midstep", config.readable_midstep}};
  }
  return Dumps(json{{"op", "config"},
                    {"num_slots", config.num_slots},
                    {"hash_block_size", config.hash_block_size},
                    {"enabled", config.enabled},
                    {"transfer", transfer}});
}

std::string FormatCall(const Call& call) {
  const auto& [name, spec] = SpecOf(call.op);
  json line{{"op", name}};
  for (Arg arg : spec->args) line[ArgName(arg)] = ArgJson(arg, call);
  return Dumps(line);
}

PoolConfig ConfigOf(const SlotPool& pool) {
  PoolConfig config;
  config.num_slots = pool.num_slots();
  config.hash_block_size = pool.hash_block_size();
  config.enabled = pool.enabled();
  config.kind = pool.transfer().kind();
  config.fork_tokens = pool.transfer().fork_tokens();
  config.readable_midstep = pool.transfer().readable_midstep();
  return config;
}

absl::StatusOr<SlotPool> MakePool(const PoolConfig& config) {
  auto transfer = StateTransfer::Create(config.kind, config.fork_tokens,
                                        config.readable_midstep);
  if (!transfer.ok()) return transfer.status();
  return SlotPool::Create(config.num_slots, *transfer, config.hash_block_size,
                          config.enabled);
}

CallResult Invoke(SlotPool& pool, const Call& c) {
  static const Sequence kNoSeq;
  const Sequence& seq = c.seq ? *c.seq : kNoSeq;
  switch (c.op) {
    case Op::kHasFree:
      return FromStatusOr(pool.HasFree(c.a));
    case Op::kNumFree:
      return CallResult{{}, pool.NumFree()};
    case Op::kIsFree:
      return FromStatusOr(pool.IsFree(c.a));
    case Op::kHoldsCheckpoint:
      return FromStatusOr(pool.HoldsCheckpoint(c.a));
    case Op::kPop:
      return FromStatusOr(pool.Pop());
    case Op::kPopMany:
      return FromStatusOr(pool.PopMany(c.a));
    case Op::kClaim:
      return FromStatus(pool.Claim(c.a));
    case Op::kMarkSpeculative:
      return FromStatus(pool.MarkSpeculative(c.a));
    case Op::kPromote:
      return FromStatus(pool.Promote(c.a));
    case Op::kRelease:
      return FromStatus(pool.Release(c.a));
    case Op::kReleaseMany:
      return FromStatus(pool.ReleaseMany(c.ints));
    case Op::kExtend:
      return FromStatus(pool.Extend(c.a));
    case Op::kRetireTop:
      return FromStatusOr(pool.RetireTop());
    case Op::kApplies:
      return CallResult{{}, pool.Applies(seq)};
    case Op::kLookup:
      return FromStatusOr(pool.Lookup(c.a));
    case Op::kResumableHit:
      return FromStatusOr(pool.ResumableHit(seq, c.a, c.ints, c.flag));
    case Op::kReserveMidstep:
      return FromStatusOr(pool.ReserveMidstep(seq, c.pairs));
    case Op::kPublishMidstep:
      return FromStatus(pool.PublishMidstep(c.reservations, c.seq));
    case Op::kCancelMidstep:
      return FromStatus(pool.CancelMidstep(c.reservations));
    case Op::kCheckpoint:
      return FromStatusOr(pool.Checkpoint(seq, c.a, c.b));
    case Op::kCheckpointFates:
      return CallResult{{}, pool.Fates()};
    case Op::kOccupancy:
      return CallResult{{}, pool.GetOccupancy()};
    case Op::kRecordRelocation:
      return FromStatus(pool.RecordRelocation(c.a, c.b));
    case Op::kTakeRelocations:
      return CallResult{{}, pool.TakeRelocations()};
    case Op::kUnindex:
      return FromStatus(pool.Unindex(c.a));
    case Op::kClearIndex:
      pool.ClearIndex();
      return CallResult{};
    case Op::kInvalidate:
      return FromStatus(pool.Invalidate(c.a));
    case Op::kPin:
      return FromStatus(pool.Pin(c.a, c.flag));
    case Op::kIsPinned:
      return FromStatusOr(pool.IsPinned(c.a));
    case Op::kPinCount:
      return FromStatusOr(pool.PinCount(c.a));
    case Op::kUnpin:
      return FromStatus(pool.Unpin(c.a));
    case Op::kDropReader:
      return FromStatus(pool.DropReader(c.a));
    case Op::kReleasePins:
      pool.ReleasePins();
      return CallResult{};
    case Op::kDump:
      return CallResult{{}, std::make_shared<const PoolSnapshot>(pool.Dump())};
  }
  return FromStatus(absl::InternalError("unhandled op"));
}

std::string FormatError(std::string_view message) {
  return Dumps(json{{"error", std::string(message)}});
}

std::string FormatResult(const CallResult& result) {
  if (!result.status.ok()) return FormatError(result.status.ToString());
  return Dumps(json{{"ret", std::visit(ValueToJson{}, result.value)}});
}

namespace {

// What the tier makes of call `i` (see TierReplay).
void FeedTier(SlotPool& pool, HostTier& tier, const Call& call,
              const CallResult& result, size_t i,
              std::vector<std::string>& events) {
  json demoted = json::array(), evicted = json::array(), erased = json::array();
  for (const SlotPool::Spent& spent : pool.spent()) {
    const HostTier::Filed filed = tier.Insert(spent.hash, spent.speculative);
    demoted.push_back(json::array({spent.hash, spent.speculative ? 1 : 0}));
    if (filed.evicted_hash >= 0) evicted.push_back(filed.evicted_hash);
  }
  pool.ClearSpent();
  int64_t tier_hit = 0;
  if (result.status.ok() && call.op == Op::kUnindex && tier.Erase(call.a)) {
    erased.push_back(call.a);
  } else if (result.status.ok() && call.op == Op::kClearIndex) {
    for (int64_t hash : tier.Dump()) erased.push_back(hash);
    tier.Clear();
  } else if (result.status.ok() && call.op == Op::kResumableHit && !call.flag &&
             call.seq.has_value()) {
    const int64_t device = std::get<int64_t>(result.value);
    tier_hit = tier.Deepest(pool, *call.seq, call.a, call.ints, device).blocks;
  }
  if (demoted.empty() && erased.empty() && tier_hit == 0) return;
  events.push_back(Dumps(json{{"line", i},
                              {"demoted", demoted},
                              {"evicted", evicted},
                              {"erased", erased},
                              {"tier_hit", tier_hit}}));
}

}  // namespace

std::vector<std::string> ReplayTrace(const std::vector<std::string>& lines,
                                     Timing* timing, TierReplay* tier) {
  std::optional<HostTier> host_tier;
  if (tier != nullptr) host_tier.emplace(tier->entries);
  using Clock = std::chrono::steady_clock;
  std::vector<std::string> out(lines.size());
  std::vector<ParsedLine> parsed;
  parsed.reserve(lines.size());
  for (const std::string& line : lines) parsed.push_back(ParseLine(line));

  std::optional<SlotPool> pool;
  std::string no_pool_reason;
  // Results of a run of calls are kept until the run ends so that the clock
  // is read only around runs, not around every call.
  std::vector<CallResult> results(lines.size());
  Clock::time_point run_start;
  bool in_run = false;
  auto stop_run = [&] {
    if (!in_run) return;
    if (timing) timing->nanos += (Clock::now() - run_start).count();
    in_run = false;
  };

  for (size_t i = 0; i < parsed.size(); ++i) {
    const ParsedLine& p = parsed[i];
    if (p.kind == ParsedLine::Kind::kConfig) {
      stop_run();
      if (i != 0) {
        out[i] = FormatError("ValueError: config must be the first line");
        continue;
      }
      auto made = MakePool(p.config);
      if (made.ok()) {
        pool.emplace(std::move(*made));
        if (host_tier.has_value()) pool->LogSpent(true);
        out[i] = Dumps(json{{"ok", true}});
      } else {
        no_pool_reason = made.status().ToString();
        out[i] = FormatError(no_pool_reason);
      }
      continue;
    }
    if (i == 0 && p.kind == ParsedLine::Kind::kCall) {
      no_pool_reason = "the first line must be a config";
      out[i] = FormatError(no_pool_reason);
      continue;
    }
    if (p.kind == ParsedLine::Kind::kError) {
      stop_run();
      out[i] = FormatError(p.error);
      if (i == 0) no_pool_reason = "the first line must be a config";
      continue;
    }
    if (!pool) {
      out[i] = FormatError(absl::StrCat("no pool (", no_pool_reason, ")"));
      continue;
    }
    if (p.call.op == Op::kDump) {
      stop_run();
      results[i] = Invoke(*pool, p.call);
      continue;
    }
    if (!in_run && timing) {
      in_run = true;
      run_start = Clock::now();
    }
    results[i] = Invoke(*pool, p.call);
    if (timing) ++timing->calls;
    if (host_tier.has_value()) {
      FeedTier(*pool, *host_tier, p.call, results[i], i, tier->events);
    }
  }
  stop_run();
  if (host_tier.has_value()) {
    tier->events.push_back(Dumps(json{{"dump", host_tier->Dump()}}));
  }
  for (size_t i = 0; i < parsed.size(); ++i) {
    if (out[i].empty()) out[i] = FormatResult(results[i]);
  }
  return out;
}

}  // namespace statecache::replay
