#include "bench/loadgen/record.h"

#include <fstream>
#include <string>
#include <utility>
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace statecache::loadgen {
namespace {

using nlohmann::json;

constexpr char kFormat[] = "statecache-passes";
constexpr int kVersion = 1;

json Hashes(absl::Span<const int64_t> hashes) {
  return json(std::vector<int64_t>(hashes.begin(), hashes.end()));
}

}  // namespace

json RecordHeader(const ModelIdentity& identity, const PoolConfig& pool,
                  json run) {
  return json{
      {"format", kFormat},
      {"version", kVersion},
      {"source", "statecache-loadgen"},
      {"identity",
       {{"model_id", identity.model_id},
        {"hash_block_size", identity.hash_block_size},
        {"hash_namespace", identity.hash_namespace},
        {"num_spec", identity.num_spec}}},
      {"pool",
       {{"num_slots", pool.num_slots},
        {"transfer",
         {{"kind", pool.transfer.kind},
          {"fork_tokens", pool.transfer.fork_tokens},
          {"readable_midstep", pool.transfer.readable_midstep}}},
        {"max_operations_per_step", pool.max_operations_per_step},
        {"placement_advised", pool.placement_advised},
        {"eviction", pool.eviction}}},
      {"run", std::move(run)},
  };
}

json OpJson(const PassOp& op) {
  switch (op.kind) {
    case OpKind::kBeginPass:
      return json{{"begin_pass", json::object()}};
    case OpKind::kAdmit:
      return json{{"admit",
                   {{"request_id", op.request_id},
                    {"width", op.width},
                    {"num_tokens", op.num_tokens},
                    {"anchor_pos", op.anchor_pos},
                    {"block_hashes", Hashes(op.block_hashes)},
                    {"kv_hit_blocks", op.kv_hit_blocks}}}};
    case OpKind::kResumableHit:
      return json{{"resumable_hit",
                   {{"num_tokens", op.num_tokens},
                    {"block_hashes", Hashes(op.block_hashes)},
                    {"kv_hit_blocks", op.kv_hit_blocks},
                    {"assume_checkpointed", false}}}};
    case OpKind::kReserve: {
      json positions = json::array();
      for (const MidstepPosition& p : op.positions) {
        positions.push_back({{"position", p.position}, {"hash", p.hash}});
      }
      return json{{"reserve",
                   {{"request_id", op.request_id},
                    {"positions", std::move(positions)}}}};
    }
    case OpKind::kPublish:
      return json{{"publish",
                   {{"request_id", op.request_id}, {"keep_all", op.keep_all}}}};
    case OpKind::kCheckpoint:
      return json{{"checkpoint",
                   {{"request_id", op.request_id},
                    {"boundary_blocks", op.boundary_blocks},
                    {"hash", op.hash},
                    {"anchor_pos", op.anchor_pos}}}};
    case OpKind::kConsumeFork:
      return json{{"consume_fork", {{"request_id", op.request_id}}}};
    case OpKind::kRelease:
      return json{{"release", {{"request_id", op.request_id}}}};
    case OpKind::kUnindex:
      return json{{"unindex", {{"hashes", Hashes(op.hashes)}}}};
    case OpKind::kClearIndex:
      return json{{"clear_index", json::object()}};
  }
  return json::object();
}

std::vector<int32_t> ResultCodes(const StepResults& results) {
  std::vector<int32_t> codes;
  codes.reserve(results.results.size());
  for (const auto& r : results.results) {
    codes.push_back(static_cast<int32_t>(r.status().code()));
  }
  return codes;
}

json ResultJson(const absl::StatusOr<OperationResult>& result) {
  if (!result.ok()) return nullptr;
  struct Visitor {
    json operator()(const BeginPassResult& r) const {
      json moves = json::array();
      for (const SlotMove& m : r.moves) {
        moves.push_back({{"request_id", m.request_id},
                         {"index", m.index},
                         {"from_slot", m.from_slot},
                         {"to_slot", m.to_slot}});
      }
      return {
          {"begin_pass",
           {{"moves", std::move(moves)}, {"pins_released", r.pins_released}}}};
    }
    json operator()(const AdmitResult& r) const {
      return {{"admit",
               {{"slots", r.slots},
                {"fork_src", r.fork_src},
                {"blocks_resumed", r.blocks_resumed},
                {"adopted", r.adopted}}}};
    }
    json operator()(const ResumableHitResult& r) const {
      return {{"resumable_hit", {{"blocks", r.blocks}}}};
    }
    json operator()(const LookupResult& r) const {
      return {{"lookup", {{"slot", r.slot}}}};
    }
    json operator()(const ReserveResult& r) const {
      json reservations = json::array();
      for (const MidstepReservation& m : r.reservations) {
        reservations.push_back(
            {{"slot", m.slot}, {"position", m.position}, {"hash", m.hash}});
      }
      return {{"reserve", {{"reservations", std::move(reservations)}}}};
    }
    json operator()(const PublishResult& r) const {
      return {{"publish", {{"published", r.published}}}};
    }
    json operator()(const CancelResult& r) const {
      return {{"cancel", {{"cancelled", r.cancelled}}}};
    }
    json operator()(const ForkCheckpointResult& r) const {
      return {{"checkpoint",
               {{"state_slot", r.state_slot},
                {"fork_src", r.fork_src},
                {"kept", r.kept}}}};
    }
    json operator()(const ConsumeForkResult& r) const {
      return {{"consume_fork", {{"fork_src", r.fork_src}}}};
    }
    json operator()(const AdoptForkSourceResult& r) const {
      return {{"adopt_fork_source", {{"state_slot", r.state_slot}}}};
    }
    json operator()(const ReleaseResult& r) const {
      return {{"release", {{"slots_released", r.slots_released}}}};
    }
    json operator()(const UnindexResult& r) const {
      return {{"unindex", {{"orphaned", r.orphaned}}}};
    }
    json operator()(const ClearIndexResult&) const {
      return {{"clear_index", json::object()}};
    }
    json operator()(const CopyOpResult& r) const {
      return {{"copy", {{"bytes", r.bytes}}}};
    }
    json operator()(const SnapshotResult& r) const {
      return {{"snapshot", {{"slot", r.slot}, {"kept", r.kept}}}};
    }
  };
  return std::visit(Visitor{}, *result);
}

json ResultsJson(const StepResults& results) {
  json out = json::array();
  for (const auto& r : results.results) out.push_back(ResultJson(r));
  return out;
}

RecordingTarget::RecordingTarget(StepTarget& inner, std::FILE* out,
                                 const json& header)
    : inner_(inner), out_(out) {
  WriteLine(header.dump());
}

void RecordingTarget::WriteLine(const std::string& line) {
  if (std::fwrite(line.data(), 1, line.size(), out_) != line.size() ||
      std::fputc('\n', out_) == EOF) {
    ok_ = false;
  }
}

absl::StatusOr<StepResults> RecordingTarget::Run(const Pass& pass,
                                                 double* seconds) {
  absl::StatusOr<StepResults> results = inner_.Run(pass, seconds);
  Write(pass, results, *seconds);
  return results;
}

void RecordingTarget::Write(const Pass& pass,
                            const absl::StatusOr<StepResults>& results,
                            double seconds) {
  json line = {{"pass", passes_++}};
  json ops = json::array();
  for (const PassOp& op : pass.ops) ops.push_back(OpJson(op));
  line["ops"] = std::move(ops);
  if (results.ok()) {
    line["codes"] = ResultCodes(*results);
    line["results"] = ResultsJson(*results);
  }
  line["us"] = seconds * 1e6;
  WriteLine(line.dump());
}

namespace {

// Reads one operation into `op`; hash lists go to `storage`.
absl::Status ParseOp(const json& j, std::deque<std::vector<int64_t>>& storage,
                     PassOp& op) {
  if (!j.is_object() || j.size() != 1) {
    return absl::InvalidArgumentError("an operation is an object of one key");
  }
  const std::string& kind = j.begin().key();
  const json& f = j.begin().value();
  if (!f.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(kind, " is not an object"));
  }
  auto hashes = [&](const char* name) -> absl::Span<const int64_t> {
    storage.push_back(f.value(name, std::vector<int64_t>{}));
    return storage.back();
  };
  if (kind == "begin_pass") {
    op.kind = OpKind::kBeginPass;
  } else if (kind == "admit") {
    op.kind = OpKind::kAdmit;
    op.request_id = f.at("request_id").get<std::string>();
    op.width = f.value("width", 1);
    op.num_tokens = f.value("num_tokens", int64_t{0});
    op.anchor_pos = f.value("anchor_pos", int64_t{0});
    op.block_hashes = hashes("block_hashes");
    op.kv_hit_blocks = f.value("kv_hit_blocks", 0);
  } else if (kind == "resumable_hit") {
    op.kind = OpKind::kResumableHit;
    if (f.value("assume_checkpointed", false)) {
      return absl::InvalidArgumentError(
          "resumable_hit: assume_checkpointed is not replayed");
    }
    op.num_tokens = f.value("num_tokens", int64_t{0});
    op.block_hashes = hashes("block_hashes");
    op.kv_hit_blocks = f.value("kv_hit_blocks", 0);
  } else if (kind == "reserve") {
    op.kind = OpKind::kReserve;
    op.request_id = f.at("request_id").get<std::string>();
    for (const json& p : f.value("positions", json::array())) {
      op.positions.push_back(
          MidstepPosition{.position = p.value("position", int64_t{0}),
                          .hash = p.value("hash", int64_t{0})});
    }
  } else if (kind == "publish") {
    op.kind = OpKind::kPublish;
    op.request_id = f.at("request_id").get<std::string>();
    op.keep_all = f.value("keep_all", false);
  } else if (kind == "checkpoint") {
    op.kind = OpKind::kCheckpoint;
    op.request_id = f.at("request_id").get<std::string>();
    op.boundary_blocks = f.value("boundary_blocks", int64_t{0});
    op.hash = f.value("hash", int64_t{0});
    op.anchor_pos = f.value("anchor_pos", int64_t{0});
  } else if (kind == "consume_fork") {
    op.kind = OpKind::kConsumeFork;
    op.request_id = f.at("request_id").get<std::string>();
  } else if (kind == "release") {
    op.kind = OpKind::kRelease;
    op.request_id = f.at("request_id").get<std::string>();
  } else if (kind == "unindex") {
    op.kind = OpKind::kUnindex;
    op.hashes = f.value("hashes", std::vector<int64_t>{});
  } else if (kind == "clear_index") {
    op.kind = OpKind::kClearIndex;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("operation kind '", kind, "' is not replayed"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RecordedPasses> ReadRecordedPasses(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  RecordedPasses out;
  std::string text;
  int64_t line_no = 0;
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":", line_no, ": ", what));
  };
  while (std::getline(in, text)) {
    ++line_no;
    if (text.empty()) continue;
    try {
      json j = json::parse(text);
      if (line_no == 1) {
        if (j.value("format", "") != kFormat ||
            j.value("version", 0) != kVersion) {
          return bad(absl::StrCat("not a ", kFormat, " version ", kVersion,
                                  " header"));
        }
        const json& id = j.at("identity");
        out.identity = ModelIdentity{
            .model_id = id.value("model_id", ""),
            .hash_block_size = id.at("hash_block_size").get<int64_t>(),
            .hash_namespace = id.value("hash_namespace", ""),
            .num_spec = id.value("num_spec", 0)};
        const json& pool = j.at("pool");
        const json& transfer = pool.value("transfer", json::object());
        out.pool = PoolConfig{
            .num_slots = pool.value("num_slots", int64_t{0}),
            .transfer = TransferConfig{.kind = transfer.value("kind", ""),
                                       .fork_tokens = transfer.value(
                                           "fork_tokens", int64_t{0}),
                                       .readable_midstep = transfer.value(
                                           "readable_midstep", false)},
            .max_operations_per_step = pool.value("max_operations_per_step", 0),
            .placement_advised = pool.value("placement_advised", false),
            .eviction = pool.value("eviction", std::string("lru"))};
        out.header = std::move(j);
        continue;
      }
      Pass pass;
      for (const json& op : j.at("ops")) {
        PassOp parsed;
        if (absl::Status st = ParseOp(op, out.hash_storage, parsed); !st.ok()) {
          return bad(std::string(st.message()));
        }
        pass.ops.push_back(std::move(parsed));
      }
      std::vector<int32_t> codes = j.value("codes", std::vector<int32_t>{});
      if (!codes.empty() && codes.size() != pass.ops.size()) {
        return bad(absl::StrCat(codes.size(), " codes for ", pass.ops.size(),
                                " operations"));
      }
      json results;
      if (auto it = j.find("results"); it != j.end()) {
        results = std::move(*it);
      }
      if (!results.is_null() &&
          (!results.is_array() || results.size() != pass.ops.size())) {
        return bad(
            absl::StrCat("results are not an array of ", pass.ops.size()));
      }
      out.passes.push_back(std::move(pass));
      out.codes.push_back(std::move(codes));
      out.results.push_back(std::move(results));
    } catch (const json::exception& e) {
      return bad(e.what());
    }
  }
  if (line_no == 0) return bad("empty file");
  return out;
}

}  // namespace statecache::loadgen
