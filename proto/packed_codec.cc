#include "proto/packed_codec.h"

#include <array>
#include <limits>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "proto/status_mapping.h"

namespace statecache {
namespace {

using google::protobuf::RepeatedField;
using google::protobuf::RepeatedPtrField;

// ================================================================ the layout
//
// Every field of every message the packed form carries, in field-number
// order within its message: the layout rule's input, written once. Where
// each field goes follows from its type and name (Place, below), as the rule
// in statecache.proto says:
//   * a string (request_id): its length in request_id_lengths, its bytes in
//     request_ids;
//   * a field named `hash`: the next entry of hashes;
//   * any other scalar (integer, or bool as 0/1): the next entry of args
//     (values, for results);
//   * a repeated field: its length in args (values), then its elements by
//     the rules above (`hashes` and `block_hashes` elements are hashes; a
//     repeated message's elements are each element's fields in turn).
// tests/proto/packed_codec_test.cc checks these rows against the .proto's
// descriptors; a message with no row has no field (BeginPass, ClearIndex,
// ClearIndexResult).
#define STATECACHE_PACKED_FIELDS(X)    \
  X(Admit, request_id)                 \
  X(Admit, width)                      \
  X(Admit, num_tokens)                 \
  X(Admit, anchor_pos)                 \
  X(Admit, block_hashes)               \
  X(Admit, kv_hit_blocks)              \
  X(ResumableHit, num_tokens)          \
  X(ResumableHit, block_hashes)        \
  X(ResumableHit, kv_hit_blocks)       \
  X(ResumableHit, assume_checkpointed) \
  X(Lookup, hash)                      \
  X(Reserve, request_id)               \
  X(Reserve, positions)                \
  X(MidstepPosition, position)         \
  X(MidstepPosition, hash)             \
  X(Publish, request_id)               \
  X(Publish, keep_all)                 \
  X(Cancel, request_id)                \
  X(Checkpoint, request_id)            \
  X(Checkpoint, boundary_blocks)       \
  X(Checkpoint, hash)                  \
  X(Checkpoint, anchor_pos)            \
  X(ConsumeFork, request_id)           \
  X(AdoptForkSource, request_id)       \
  X(Release, request_id)               \
  X(Unindex, hashes)                   \
  X(Copy, request_id)                  \
  X(Copy, from_index)                  \
  X(Copy, to_index)                    \
  X(Snapshot, request_id)              \
  X(Snapshot, position)                \
  X(Snapshot, hash)                    \
  X(BeginPassResult, moves)            \
  X(BeginPassResult, pins_released)    \
  X(SlotMove, request_id)              \
  X(SlotMove, index)                   \
  X(SlotMove, from_slot)               \
  X(SlotMove, to_slot)                 \
  X(AdmitResult, slots)                \
  X(AdmitResult, fork_src)             \
  X(AdmitResult, blocks_resumed)       \
  X(AdmitResult, adopted)              \
  X(ResumableHitResult, blocks)        \
  X(LookupResult, slot)                \
  X(ReserveResult, reservations)       \
  X(Reservation, slot)                 \
  X(Reservation, position)             \
  X(Reservation, hash)                 \
  X(PublishResult, published)          \
  X(CancelResult, cancelled)           \
  X(CheckpointResult, state_slot)      \
  X(CheckpointResult, fork_src)        \
  X(CheckpointResult, kept)            \
  X(ConsumeForkResult, fork_src)       \
  X(AdoptForkSourceResult, state_slot) \
  X(ReleaseResult, slots_released)     \
  X(UnindexResult, orphaned)           \
  X(CopyResult, bytes)                 \
  X(SnapshotResult, slot)              \
  X(SnapshotResult, kept)

// The result fields numbered 100 and above (added after the layout was
// fixed), in field-number order within each message: each a scalar, one
// entry of PackedResults.late_values per successful result of its kind.
// tests/proto/packed_codec_test.cc checks these rows against the .proto's
// descriptors too.
#define STATECACHE_PACKED_LATE_FIELDS(X) \
  X(AdmitResult, from_tier)              \
  X(AdmitResult, branch_blocks)          \
  X(AdmitResult, continuation_blocks)    \
  X(ResumableHitResult, tier_blocks)     \
  X(LookupResult, in_tier)

// Operation's kinds: the field number in Operation's oneof (= the packed
// form's kind), the message (its result is NameResult), the oneof field's
// name and, for a kind that names a request, `request_id`.
#define STATECACHE_PACKED_KINDS(X)                      \
  X(1, BeginPass, begin_pass)                           \
  X(2, Admit, admit, request_id)                        \
  X(3, ResumableHit, resumable_hit)                     \
  X(4, Lookup, lookup)                                  \
  X(5, Reserve, reserve, request_id)                    \
  X(6, Publish, publish, request_id)                    \
  X(7, Cancel, cancel, request_id)                      \
  X(8, Checkpoint, checkpoint, request_id)              \
  X(9, ConsumeFork, consume_fork, request_id)           \
  X(10, AdoptForkSource, adopt_fork_source, request_id) \
  X(11, Release, release, request_id)                   \
  X(12, Unindex, unindex)                               \
  X(13, ClearIndex, clear_index)                        \
  X(14, Copy, copy, request_id)                         \
  X(15, Snapshot, snapshot, request_id)

#define STATECACHE_COUNT_KIND(...) +1
// Kinds are 1..kMaxKind.
constexpr int kMaxKind = 0 STATECACHE_PACKED_KINDS(STATECACHE_COUNT_KIND);
#undef STATECACHE_COUNT_KIND

// A kind that names a request: its Read returns the id.
template <typename M>
constexpr bool kNamesRequest = requires(const M& m) {
  m.request_id();
};
template <typename M>
using ReadReturn = std::conditional_t<kNamesRequest<M>, std::string_view, void>;

// One field's accessors: its getter, setter (scalars) and mutable accessor
// (strings and repeated fields). Generic lambdas: only the ones a visitor
// calls are instantiated.
template <typename Get, typename Set, typename Mutable>
struct Field {
  Get get;
  Set set;
  Mutable mutable_field;
};
template <typename Get, typename Set, typename Mutable>
Field(Get, Set, Mutable) -> Field<Get, Set, Mutable>;

template <typename T>
constexpr bool kIsRepeatedScalar = false;
template <typename T>
constexpr bool kIsRepeatedScalar<RepeatedField<T>> = true;
template <typename T>
constexpr bool kIsRepeatedMessage = false;
template <typename T>
constexpr bool kIsRepeatedMessage<RepeatedPtrField<T>> = true;

constexpr bool IsHashName(std::string_view name) {
  return name == "hash" || name == "hashes" || name == "block_hashes";
}

// The rule: hands field `f` of `m` to the visitor's method for its place.
template <bool kHashName, typename V, typename M, typename F>
void Place(V& v, M& m, const F& f) {
  using T = std::remove_cvref_t<decltype(f.get(m))>;
  if constexpr (std::is_same_v<T, std::string>) {
    v.Id(m, f);
  } else if constexpr (kIsRepeatedScalar<T>) {
    if constexpr (kHashName) {
      v.Hashes(m, f);
    } else {
      v.Values(m, f);
    }
  } else if constexpr (kIsRepeatedMessage<T>) {
    v.Each(m, f);
  } else if constexpr (kHashName) {
    v.Hash(m, f);
  } else {
    v.Value(m, f);
  }
}

// Walks `m`'s fields (M is the message, const for the writing visitors) in
// the layout's order, calling the visitor's Id, Value, Hash, Values, Hashes
// or Each for each.
template <typename V, typename M>
void Fields(V& v, M& m) {
  using T = std::remove_const_t<M>;
#define STATECACHE_FIELD(Message, name)                                 \
  if constexpr (std::is_same_v<T, v1::Message>) {                       \
    Place<IsHashName(#name)>(                                           \
        v, m,                                                           \
        Field{[](const auto& o) -> decltype(auto) { return o.name(); }, \
              [](auto* o, auto x) { o->set_##name(x); },                \
              [](auto* o) { return o->mutable_##name(); }});            \
  }
  STATECACHE_PACKED_FIELDS(STATECACHE_FIELD)
#undef STATECACHE_FIELD
}

// ================================================================ visitors

// Reads columns into a message. Unchecked (the daemon's operations, which
// ValidatePackedOperations has checked) or checked (results: every entry
// bounds-checked and range-checked; the first failure names itself in
// *error and every later read yields 0). With kSetIds, request ids are set
// in the message; else only the last one is kept, in `id`.
template <bool kChecked, bool kSetIds>
class ColumnReader {
 public:
  ColumnReader(const std::string& ids, const RepeatedField<uint32_t>& lengths,
               const RepeatedField<int64_t>& values,
               const RepeatedField<int64_t>& hashes, PackedCursor& at,
               const char** error = nullptr)
      : ids_(ids),
        lengths_(lengths),
        values_(values),
        hashes_(hashes),
        at_(at),
        error_(error) {}

  // The last request id read, viewing the request_ids column.
  std::string_view id;

  template <typename M, typename F>
  void Id(M& m, const F& f) {
    if constexpr (kChecked) {
      if (!TakeId()) return;
    }
    const size_t n = lengths_[at_.id++];
    id = std::string_view(ids_.data() + at_.id_offset, n);
    at_.id_offset += n;
    if constexpr (kSetIds) f.mutable_field(&m)->assign(id.data(), id.size());
  }

  template <typename M, typename F>
  void Value(M& m, const F& f) {
    using T = std::remove_cvref_t<decltype(f.get(m))>;
    const int64_t v = NextValue();
    if constexpr (std::is_same_v<T, bool>) {
      if constexpr (kChecked) {
        if (v != 0 && v != 1) Fail("a bool is not 0 or 1");
      }
      f.set(&m, v != 0);
    } else {
      if constexpr (kChecked && std::is_same_v<T, int32_t>) {
        if (v < std::numeric_limits<int32_t>::min() ||
            v > std::numeric_limits<int32_t>::max()) {
          Fail("a value is beyond int32");
        }
      }
      f.set(&m, static_cast<T>(v));
    }
  }

  template <typename M, typename F>
  void Hash(M& m, const F& f) {
    f.set(&m, NextHash());
  }

  template <typename M, typename F>
  void Hashes(M& m, const F& f) {
    List(/*in_hashes=*/true, f.mutable_field(&m));
  }

  template <typename M, typename F>
  void Values(M& m, const F& f) {
    List(/*in_hashes=*/false, f.mutable_field(&m));
  }

  // Every element of a repeated message has a value of its own, so a length
  // beyond the values left is short. The elements already there are reused
  // (no allocation once warm).
  template <typename M, typename F>
  void Each(M& m, const F& f) {
    const int n = Length(/*in_hashes=*/false);
    auto* elements = f.mutable_field(&m);
    while (elements->size() > n) elements->RemoveLast();
    for (int k = 0; k < n && Ok(); ++k) {
      Fields(*this,
             k < elements->size() ? *elements->Mutable(k) : *elements->Add());
    }
  }

 private:
  bool Ok() const { return !kChecked || *error_ == nullptr; }
  void Fail(const char* what) {
    if (*error_ == nullptr) *error_ = what;
  }
  bool TakeId() {
    if (!Ok()) return false;
    if (at_.id >= lengths_.size()) {
      Fail("request_id_lengths is too short");
    } else if (lengths_[at_.id] > ids_.size() - at_.id_offset) {
      Fail("request_ids is shorter than request_id_lengths say");
    }
    return Ok();
  }
  int64_t NextValue() {
    return Next(values_, at_.value, "values is too short");
  }
  int64_t NextHash() { return Next(hashes_, at_.hash, "hashes is too short"); }
  // The next entry of `column`, read at `at` (checked: `short_column` when
  // there is none).
  int64_t Next(const RepeatedField<int64_t>& column, int& at,
               const char* short_column) {
    if constexpr (kChecked) {
      if (!Ok()) return 0;
      if (at >= column.size()) {
        Fail(short_column);
        return 0;
      }
    }
    return column[at++];
  }
  // A scalar list into `out` (replacing it): its length from the values,
  // its elements from hashes (else from the values), copied at once.
  void List(bool in_hashes, RepeatedField<int64_t>* out) {
    const int n = Length(in_hashes);
    const RepeatedField<int64_t>& column = in_hashes ? hashes_ : values_;
    int& at = in_hashes ? at_.hash : at_.value;
    out->Clear();
    out->Add(column.data() + at, column.data() + at + n);
    at += n;
  }
  // A length from the values, of a list whose elements are in hashes (else
  // in values): at most the entries left there (checked).
  int Length(bool in_hashes) {
    const int64_t n = NextValue();
    if constexpr (kChecked) {
      const int left =
          in_hashes ? hashes_.size() - at_.hash : values_.size() - at_.value;
      if (n < 0) {
        Fail("a length is negative");
        return 0;
      }
      if (n > left) {
        Fail(in_hashes ? "a length runs past the end of hashes"
                       : "a length runs past the end of values");
        return 0;
      }
    }
    return static_cast<int>(n);
  }

  const std::string& ids_;
  const RepeatedField<uint32_t>& lengths_;
  const RepeatedField<int64_t>& values_;
  const RepeatedField<int64_t>& hashes_;
  PackedCursor& at_;
  const char** error_;
};

// Appends a message's fields to the columns of `Packed` (PackedOperations,
// its values in args; or PackedResults). A request id comes from the
// message, or from `*id` where given (an operation's, passed apart). Each
// column is reached only when a field goes to it.
template <typename Packed>
class ColumnWriter {
 public:
  explicit ColumnWriter(Packed* out, const std::string_view* id = nullptr)
      : out_(out), id_(id) {}

  template <typename M, typename F>
  void Id(M& m, const F& f) {
    const std::string_view id =
        id_ != nullptr ? *id_ : std::string_view(f.get(m));
    out_->mutable_request_ids()->append(id.data(), id.size());
    out_->add_request_id_lengths(static_cast<uint32_t>(id.size()));
  }
  template <typename M, typename F>
  void Value(M& m, const F& f) {
    values()->Add(static_cast<int64_t>(f.get(m)));
  }
  template <typename M, typename F>
  void Hash(M& m, const F& f) {
    out_->add_hashes(f.get(m));
  }
  template <typename M, typename F>
  void Hashes(M& m, const F& f) {
    const auto& r = f.get(m);
    values()->Add(r.size());
    out_->mutable_hashes()->Add(r.begin(), r.end());
  }
  template <typename M, typename F>
  void Values(M& m, const F& f) {
    const auto& r = f.get(m);
    values()->Add(r.size());
    values()->Add(r.begin(), r.end());
  }
  template <typename M, typename F>
  void Each(M& m, const F& f) {
    const auto& r = f.get(m);
    values()->Add(r.size());
    for (const auto& element : r) Fields(*this, element);
  }

 private:
  RepeatedField<int64_t>* values() {
    if constexpr (std::is_same_v<Packed, v1::PackedOperations>) {
      return out_->mutable_args();
    } else {
      return out_->mutable_values();
    }
  }

  Packed* out_;
  const std::string_view* id_;
};

// An operation's PackedLayout letters (see packed_codec.h).
class LetterWriter {
 public:
  explicit LetterWriter(std::string* out) : out_(out) {}

  template <typename M, typename F>
  void Id(M&, const F&) {
    *out_ += 'r';
  }
  template <typename M, typename F>
  void Value(M& m, const F& f) {
    using T = std::remove_cvref_t<decltype(f.get(m))>;
    static_assert(std::is_same_v<T, bool> || std::is_same_v<T, int32_t> ||
                      std::is_same_v<T, int64_t>,
                  "PackedLayout has letters for bool, int32 and int64 only");
    *out_ += std::is_same_v<T, bool>      ? 'b'
             : std::is_same_v<T, int32_t> ? 'w'
                                          : 'q';
  }
  template <typename M, typename F>
  void Hash(M&, const F&) {
    *out_ += 'h';
  }
  template <typename M, typename F>
  void Hashes(M&, const F&) {
    *out_ += 'H';
  }
  template <typename M, typename F>
  void Values(M&, const F&) {
    static_assert(sizeof(M) == 0, "no PackedLayout letter for scalar lists");
  }
  template <typename M, typename F>
  void Each(M& m, const F& f) {
    using T = std::remove_cvref_t<decltype(f.get(m))>;
    static_assert(std::is_same_v<T, RepeatedPtrField<v1::MidstepPosition>>,
                  "PackedLayout has a letter for MidstepPosition lists only");
    *out_ += 'p';
  }

 private:
  std::string* out_;
};

// ================================================================ kinds

// Kind kNumber: its messages, and where Operation and OperationResult hold
// them.
template <int kNumber>
struct Kind;
#define STATECACHE_KIND(number, Name, field, ...)                           \
  template <>                                                               \
  struct Kind<number> {                                                     \
    using Op = v1::Name;                                                    \
    static constexpr int kNumber = number;                                  \
    static constexpr const char* kName = #field;                            \
    static constexpr auto kResultCase = v1::OperationResult::k##Name;       \
    static const v1::Name& Of(const v1::Operation& o) { return o.field(); } \
    static v1::Name* MutableOf(v1::Operation* o) {                          \
      return o->mutable_##field();                                          \
    }                                                                       \
    static const v1::Name##Result& Of(const v1::OperationResult& r) {       \
      return r.field();                                                     \
    }                                                                       \
    static v1::Name##Result* MutableOf(v1::OperationResult* r) {            \
      return r->mutable_##field();                                          \
    }                                                                       \
  };
STATECACHE_PACKED_KINDS(STATECACHE_KIND)
#undef STATECACHE_KIND

// Calls f(Kind<n>{}) for every kind n.
template <typename F>
void ForEachKind(F&& f) {
#define STATECACHE_EACH(number, ...) f(Kind<number>{});
  STATECACHE_PACKED_KINDS(STATECACHE_EACH)
#undef STATECACHE_EACH
}

// Calls f(Kind<kind>{}); false, f not called, for a kind Operation does not
// have.
template <typename F>
bool ForKind(int kind, F&& f) {
  switch (kind) {
#define STATECACHE_CASE(number, ...) \
  case number:                       \
    f(Kind<number>{});               \
    return true;
    STATECACHE_PACKED_KINDS(STATECACHE_CASE)
#undef STATECACHE_CASE
  }
  return false;
}

// The kind whose result `c` is, or 0.
int KindOfResult(v1::OperationResult::ResultCase c) {
  int kind = 0;
  ForEachKind([&](auto k) {
    if (k.kResultCase == c) kind = k.kNumber;
  });
  return kind;
}

// Every kind's letters, indexed by kind; [0] is "?".
const std::array<std::string, kMaxKind + 1>& Layouts() {
  static const auto* const layouts = [] {
    auto* out = new std::array<std::string, kMaxKind + 1>();
    (*out)[0] = "?";
    ForEachKind([&](auto k) {
      static_assert(decltype(k)::kNumber >= 1 &&
                    decltype(k)::kNumber <= kMaxKind);
      LetterWriter letters(&(*out)[k.kNumber]);
      Fields(letters, decltype(k)::Op::default_instance());
    });
    return out;
  }();
  return *layouts;
}

const char* KindName(int kind) {
  const char* name = "no kind";
  ForKind(kind, [&](auto k) { name = k.kName; });
  return name;
}

// Reads the next operation into `out`; its request id, for a kind that
// names one, is returned (and set in `out` with kSetIds).
template <bool kSetIds, typename Op>
ReadReturn<Op> ReadOperation(const v1::PackedOperations& packed,
                             PackedCursor& at, Op* out) {
  ColumnReader<false, kSetIds> reader(packed.request_ids(),
                                      packed.request_id_lengths(),
                                      packed.args(), packed.hashes(), at);
  Fields(reader, *out);
  if constexpr (kNamesRequest<Op>) return reader.id;
}

// Appends operation `op` of kind `kind`, its request id `*request_id` where
// given, else the message's.
template <typename Op>
void WriteOperation(v1::PackedOperations* out, int kind, const Op& op,
                    const std::string_view* request_id = nullptr) {
  out->add_kinds(static_cast<uint32_t>(kind));
  ColumnWriter writer(out, request_id);
  Fields(writer, op);
}

template <typename Result>
void WriteResult(v1::PackedResults* out, const Result& r) {
  out->add_codes(0);
  ColumnWriter writer(out);
  Fields(writer, r);
#define STATECACHE_LATE_FIELD(Message, name)              \
  if constexpr (std::is_same_v<Result, v1::Message>) {    \
    out->add_late_values(static_cast<int64_t>(r.name())); \
  }
  STATECACHE_PACKED_LATE_FIELDS(STATECACHE_LATE_FIELD)
#undef STATECACHE_LATE_FIELD
}

}  // namespace

// ================================================================ layout

std::string_view PackedLayout(int kind) {
  const auto& layouts = Layouts();
  return kind > 0 && kind <= kMaxKind ? layouts[kind] : layouts[0];
}

// One pass over the columns with one cursor, every check beside the read it
// guards: split, the cursor would be threaded through every piece.
absl::Status ValidatePackedOperations(const v1::PackedOperations& packed) {
  const auto& args = packed.args();
  const auto& lengths = packed.request_id_lengths();
  const uint64_t id_bytes = packed.request_ids().size();
  const int num_hashes = packed.hashes_size();
  int arg = 0;
  int hash = 0;
  int id = 0;
  uint64_t id_offset = 0;
  const auto& layouts = Layouts();
  for (int i = 0; i < packed.kinds_size(); ++i) {
    const uint32_t kind = packed.kinds(i);
    if (kind == 0 || kind > static_cast<uint32_t>(kMaxKind)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "packed: operation ", i, " has unknown kind ", kind,
          " (kinds are Operation's field numbers, 1..", kMaxKind, ")"));
    }
    const std::string_view layout = layouts[kind];
    // Names what ran out or was wrong, for this operation.
    auto bad = [&](const std::string& what) {
      return absl::InvalidArgumentError(
          absl::StrCat("packed: operation ", i, " (",
                       KindName(static_cast<int>(kind)), "): ", what));
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

// ================================================================ operations

void PackedOperationReader::Read(uint32_t kind, v1::Operation* out) {
  out->Clear();
  ForKind(static_cast<int>(kind),
          [&](auto k) { ReadOperation<true>(packed_, at_, k.MutableOf(out)); });
}

absl::Status PackedOperationWriter::Write(const v1::Operation& op) {
  if (!ForKind(op.kind_case(),
               [&](auto k) { WriteOperation(out_, k.kNumber, k.Of(op)); })) {
    return absl::InvalidArgumentError("has no kind set");
  }
  return absl::OkStatus();
}

// ================================================================ results

void PackedResultWriter::Refused(const absl::Status& status) {
  out_->add_codes(static_cast<uint32_t>(ToWireCode(status)));
  out_->add_messages(std::string(status.message()));
}

absl::Status PackedResultWriter::Write(const v1::OperationResult& r) {
  if (r.code() != 0) {
    out_->add_codes(static_cast<uint32_t>(r.code()));
    out_->add_messages(r.message());
    return absl::OkStatus();
  }
  if (!ForKind(KindOfResult(r.result_case()),
               [&](auto k) { Write(k.Of(r)); })) {
    return absl::InvalidArgumentError("is OK but has no kind");
  }
  return absl::OkStatus();
}

bool PackedResultReader::NextCode(uint32_t* code, const std::string** message) {
  if (!ok()) return false;
  ++op_;
  if (op_ > packed_.codes_size()) {
    error_ = "codes is too short";
    return false;
  }
  *code = packed_.codes(op_ - 1);
  if (*code != 0) {
    if (message_ >= packed_.messages_size()) {
      error_ = "there are fewer messages than refusals";
      return false;
    }
    *message = &packed_.messages(message_++);
  }
  return true;
}

absl::Status PackedResultReader::Next() {
  uint32_t code = 0;
  const std::string* message = nullptr;
  if (!NextCode(&code, &message) || code == 0) return absl::OkStatus();
  return FromWireCode(code, *message);
}

template <typename Result>
bool PackedResultReader::ReadResult(Result* out) {
  if (!ok()) return false;
  ColumnReader<true, true> reader(
      packed_.request_ids(), packed_.request_id_lengths(), packed_.values(),
      packed_.hashes(), at_, &error_);
  Fields(reader, *out);
  // A daemon that predates late_values sends none: the fields stay at
  // their defaults.
  if (packed_.late_values_size() == 0) return ok();
#define STATECACHE_LATE_FIELD(Message, name)                  \
  if constexpr (std::is_same_v<Result, v1::Message>) {        \
    if (ok() && at_.late >= packed_.late_values_size()) {     \
      error_ = "late_values is too short";                    \
    } else if (ok()) {                                        \
      using T = std::remove_cvref_t<decltype(out->name())>;   \
      const int64_t v = packed_.late_values(at_.late++);      \
      if (std::is_same_v<T, bool> && v != 0 && v != 1) {      \
        error_ = "a bool is not 0 or 1";                      \
      } else if (std::is_same_v<T, int32_t> &&                \
                 (v < std::numeric_limits<int32_t>::min() ||  \
                  v > std::numeric_limits<int32_t>::max())) { \
        error_ = "a value is beyond int32";                   \
      } else {                                                \
        out->set_##name(static_cast<T>(v));                   \
      }                                                       \
    }                                                         \
  }
  STATECACHE_PACKED_LATE_FIELDS(STATECACHE_LATE_FIELD)
#undef STATECACHE_LATE_FIELD
  return ok();
}

bool PackedResultReader::Read(uint32_t kind, v1::OperationResult* out) {
  out->Clear();
  uint32_t code = 0;
  const std::string* message = nullptr;
  if (!NextCode(&code, &message)) return false;
  if (code != 0) {
    out->set_code(static_cast<int32_t>(code));
    out->set_message(*message);
    return true;
  }
  bool read = false;
  if (!ForKind(static_cast<int>(kind),
               [&](auto k) { read = Read(k.MutableOf(out)); })) {
    error_ = "its kind is unknown";
  }
  return read;
}

absl::Status PackedResultReader::status() const {
  if (ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("packed results: operation ", op_ - 1, ": ", error_));
}

absl::Status PackedResultReader::Finish() const {
  if (!ok()) return status();
  const char* left =
      op_ != packed_.codes_size()                     ? "codes"
      : message_ != packed_.messages_size()           ? "messages"
      : at_.value != packed_.values_size()            ? "values"
      : at_.hash != packed_.hashes_size()             ? "hashes"
      : at_.id != packed_.request_id_lengths_size()   ? "request_id_lengths"
      : at_.id_offset != packed_.request_ids().size() ? "request_ids"
      : at_.late != packed_.late_values_size()        ? "late_values"
                                                      : nullptr;
  if (left == nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("packed results: ", left,
                                                 " holds more than the ", op_,
                                                 " operations use"));
}

// ================================================================ per kind

// Each kind's typed calls, on the templates above.
#define STATECACHE_DEFINE(number, Name, field, ...)                           \
  ReadReturn<v1::Name> PackedOperationReader::Read(v1::Name* out) {           \
    return ReadOperation<false>(packed_, at_, out);                           \
  }                                                                           \
  void PackedOperationWriter::Write(__VA_OPT__(std::string_view request_id, ) \
                                        const v1::Name& op) {                 \
    static_assert(kNamesRequest<v1::Name> == (sizeof(#__VA_ARGS__) > 1));     \
    WriteOperation(out_, number, op __VA_OPT__(, &request_id));               \
  }                                                                           \
  void PackedResultWriter::Write(const v1::Name##Result& r) {                 \
    WriteResult(out_, r);                                                     \
  }                                                                           \
  bool PackedResultReader::Read(v1::Name##Result* out) {                      \
    return ReadResult(out);                                                   \
  }
STATECACHE_PACKED_KINDS(STATECACHE_DEFINE)
#undef STATECACHE_DEFINE

}  // namespace statecache
