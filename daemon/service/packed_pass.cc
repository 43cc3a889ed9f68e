#include "daemon/service/packed_pass.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace statecache {
namespace {

// Indexed by Operation's kind field number; PackedLayout's letters. The test
// packed_pass_test checks each against the message's descriptor.
constexpr std::string_view kLayouts[] = {
    "?",       // 0: no kind
    "",        // 1 begin_pass
    "rwqqHw",  // 2 admit
    "qHwb",    // 3 resumable_hit
    "h",       // 4 lookup
    "rp",      // 5 reserve
    "rb",      // 6 publish
    "r",       // 7 cancel
    "rqhq",    // 8 checkpoint
    "r",       // 9 consume_fork
    "r",       // 10 adopt_fork_source
    "r",       // 11 release
    "H",       // 12 unindex
    "",        // 13 clear_index
    "rww",     // 14 copy
    "rqh",     // 15 snapshot
};
constexpr int kNumKinds = sizeof(kLayouts) / sizeof(kLayouts[0]);

std::string KindName(int kind) {
  const google::protobuf::FieldDescriptor* field =
      v1::Operation::descriptor()->FindFieldByNumber(kind);
  return field != nullptr ? field->name() : absl::StrCat("kind ", kind);
}

}  // namespace

std::string_view PackedLayout(int kind) {
  return kind > 0 && kind < kNumKinds ? kLayouts[kind] : kLayouts[0];
}

absl::Status ValidatePackedOperations(const v1::PackedOperations& packed) {
  const auto& args = packed.args();
  const auto& lengths = packed.request_id_lengths();
  const uint64_t id_bytes = packed.request_ids().size();
  const int num_hashes = packed.hashes_size();
  int arg = 0;
  int hash = 0;
  int id = 0;
  uint64_t id_offset = 0;
  for (int i = 0; i < packed.kinds_size(); ++i) {
    const uint32_t kind = packed.kinds(i);
    const std::string_view layout = PackedLayout(static_cast<int>(kind));
    if (layout == "?") {
      return absl::InvalidArgumentError(absl::StrCat(
          "packed: operation ", i, " has unknown kind ", kind,
          " (kinds are Operation's field numbers, 1..", kNumKinds - 1, ")"));
    }
    // Names what ran out or was wrong, for this operation.
    auto bad = [&](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrCat(
          "packed: operation ", i, " (", KindName(kind), "): ", what));
    };
    auto take_arg = [&](int64_t* v) -> bool {
      if (arg >= args.size()) return false;
      *v = args[arg++];
      return true;
    };
    for (const char field : layout) {
      int64_t v = 0;
      switch (field) {
        case 'r':
          if (id >= lengths.size()) {
            return bad("request_id_lengths has too few entries");
          }
          if (lengths[id] > id_bytes - id_offset) {
            return bad("request_ids is shorter than request_id_lengths say");
          }
          id_offset += lengths[id++];
          break;
        case 'q':
          if (!take_arg(&v)) return bad("args is too short");
          break;
        case 'w':
          if (!take_arg(&v)) return bad("args is too short");
          if (v < std::numeric_limits<int32_t>::min() ||
              v > std::numeric_limits<int32_t>::max()) {
            return bad(absl::StrCat("args value ", v, " is beyond int32"));
          }
          break;
        case 'b':
          if (!take_arg(&v)) return bad("args is too short");
          if (v != 0 && v != 1) {
            return bad(absl::StrCat("args value ", v, " is not a bool (0/1)"));
          }
          break;
        case 'h':
          if (hash >= num_hashes) return bad("hashes is too short");
          ++hash;
          break;
        case 'H':
        case 'p': {
          // A length in args; the elements' hashes in hashes, and for
          // positions each element's position in args.
          if (!take_arg(&v)) return bad("args is too short");
          if (v < 0) return bad(absl::StrCat("negative length ", v));
          if (v > num_hashes - hash) {
            return bad(
                absl::StrCat("length ", v, " runs past the end of hashes"));
          }
          if (field == 'p' && v > args.size() - arg) {
            return bad(
                absl::StrCat("length ", v, " runs past the end of args"));
          }
          hash += static_cast<int>(v);
          if (field == 'p') arg += static_cast<int>(v);
          break;
        }
      }
    }
  }
  if (arg != args.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "packed: args has ", args.size(), " entries; the kinds use ", arg));
  }
  if (hash != num_hashes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "packed: hashes has ", num_hashes, " entries; the kinds use ", hash));
  }
  if (id != lengths.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("packed: request_id_lengths has ", lengths.size(),
                     " entries; the kinds use ", id));
  }
  if (id_offset != id_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("packed: request_ids has ", id_bytes,
                     " bytes; request_id_lengths use ", id_offset));
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------ reader

std::string_view PackedOperationReader::NextId() {
  const size_t n = packed_.request_id_lengths(id_++);
  std::string_view id(packed_.request_ids().data() + id_offset_, n);
  id_offset_ += n;
  return id;
}

void PackedOperationReader::Read(v1::BeginPass*) {}

std::string_view PackedOperationReader::Read(v1::Admit* out) {
  const std::string_view id = NextId();
  out->set_width(static_cast<int32_t>(NextArg()));
  out->set_num_tokens(NextArg());
  out->set_anchor_pos(NextArg());
  NextHashes(NextArg(), out->mutable_block_hashes());
  out->set_kv_hit_blocks(static_cast<int32_t>(NextArg()));
  return id;
}

void PackedOperationReader::Read(v1::ResumableHit* out) {
  out->set_num_tokens(NextArg());
  NextHashes(NextArg(), out->mutable_block_hashes());
  out->set_kv_hit_blocks(static_cast<int32_t>(NextArg()));
  out->set_assume_checkpointed(NextArg() != 0);
}

void PackedOperationReader::Read(v1::Lookup* out) { out->set_hash(NextHash()); }

std::string_view PackedOperationReader::Read(v1::Reserve* out) {
  const std::string_view id = NextId();
  const int64_t n = NextArg();
  auto* positions = out->mutable_positions();
  // Reuse the position messages already there (no allocation once warm).
  while (positions->size() > n) positions->RemoveLast();
  for (int64_t k = 0; k < n; ++k) {
    v1::MidstepPosition* p = k < positions->size()
                                 ? positions->Mutable(static_cast<int>(k))
                                 : positions->Add();
    p->set_position(NextArg());
    p->set_hash(NextHash());
  }
  return id;
}

std::string_view PackedOperationReader::Read(v1::Publish* out) {
  const std::string_view id = NextId();
  out->set_keep_all(NextArg() != 0);
  return id;
}

std::string_view PackedOperationReader::Read(v1::Cancel* out) {
  return NextId();
}

std::string_view PackedOperationReader::Read(v1::Checkpoint* out) {
  const std::string_view id = NextId();
  out->set_boundary_blocks(NextArg());
  out->set_hash(NextHash());
  out->set_anchor_pos(NextArg());
  return id;
}

std::string_view PackedOperationReader::Read(v1::ConsumeFork* out) {
  return NextId();
}

std::string_view PackedOperationReader::Read(v1::AdoptForkSource* out) {
  return NextId();
}

std::string_view PackedOperationReader::Read(v1::Release* out) {
  return NextId();
}

void PackedOperationReader::Read(v1::Unindex* out) {
  NextHashes(NextArg(), out->mutable_hashes());
}

void PackedOperationReader::Read(v1::ClearIndex*) {}

std::string_view PackedOperationReader::Read(v1::Copy* out) {
  const std::string_view id = NextId();
  out->set_from_index(static_cast<int32_t>(NextArg()));
  out->set_to_index(static_cast<int32_t>(NextArg()));
  return id;
}

std::string_view PackedOperationReader::Read(v1::Snapshot* out) {
  const std::string_view id = NextId();
  out->set_position(NextArg());
  out->set_hash(NextHash());
  return id;
}

// ------------------------------------------------------------------ writer

void PackedResultWriter::Refused(const absl::Status& status) {
  out_->add_codes(static_cast<uint32_t>(status.code()));
  out_->add_messages(std::string(status.message()));
}

void PackedResultWriter::Write(const v1::BeginPassResult& r) {
  Ok();
  Value(r.moves_size());
  for (const v1::SlotMove& m : r.moves()) {
    out_->mutable_request_ids()->append(m.request_id());
    out_->add_request_id_lengths(static_cast<uint32_t>(m.request_id().size()));
    Value(m.index());
    Value(m.from_slot());
    Value(m.to_slot());
  }
  Value(r.pins_released());
}

void PackedResultWriter::Write(const v1::AdmitResult& r) {
  Ok();
  Value(r.slots_size());
  for (int64_t s : r.slots()) Value(s);
  Value(r.fork_src());
  Value(r.blocks_resumed());
  Value(r.adopted());
}

void PackedResultWriter::Write(const v1::ResumableHitResult& r) {
  Ok();
  Value(r.blocks());
}

void PackedResultWriter::Write(const v1::LookupResult& r) {
  Ok();
  Value(r.slot());
}

void PackedResultWriter::Write(const v1::ReserveResult& r) {
  Ok();
  Value(r.reservations_size());
  for (const v1::Reservation& res : r.reservations()) {
    Value(res.slot());
    Value(res.position());
    out_->add_hashes(res.hash());
  }
}

void PackedResultWriter::Write(const v1::PublishResult& r) {
  Ok();
  Value(r.published());
}

void PackedResultWriter::Write(const v1::CancelResult& r) {
  Ok();
  Value(r.cancelled());
}

void PackedResultWriter::Write(const v1::CheckpointResult& r) {
  Ok();
  Value(r.state_slot());
  Value(r.fork_src());
  Value(r.kept());
}

void PackedResultWriter::Write(const v1::ConsumeForkResult& r) {
  Ok();
  Value(r.fork_src());
}

void PackedResultWriter::Write(const v1::AdoptForkSourceResult& r) {
  Ok();
  Value(r.state_slot());
}

void PackedResultWriter::Write(const v1::ReleaseResult& r) {
  Ok();
  Value(r.slots_released());
}

void PackedResultWriter::Write(const v1::UnindexResult& r) {
  Ok();
  Value(r.orphaned());
}

void PackedResultWriter::Write(const v1::ClearIndexResult&) { Ok(); }

void PackedResultWriter::Write(const v1::CopyResult& r) {
  Ok();
  Value(static_cast<int64_t>(r.bytes()));
}

void PackedResultWriter::Write(const v1::SnapshotResult& r) {
  Ok();
  Value(r.slot());
  Value(r.kept());
}

}  // namespace statecache
