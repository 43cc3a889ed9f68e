// The packed (columnar) form of a Step: reading a PackedOperations one
// operation at a time into the operation's own message, and writing each
// operation's result message into a PackedResults. The layout rule is in
// statecache.proto (PackedOperations): an operation's fields in field-number
// order, request ids in one column and every other value in another.
//
// The operations themselves are not re-implemented here: the daemon reads
// each packed operation into a reused v1::Admit (etc.) and runs the handler
// the list form runs, so both forms make the same decisions by construction.
//
// Thread-safety: none of these classes is; each call uses its own.
#ifndef STATECACHE_DAEMON_SERVICE_PACKED_PASS_H_
#define STATECACHE_DAEMON_SERVICE_PACKED_PASS_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "proto/statecache/v1/statecache.pb.h"

namespace statecache {

// The layout of operation kind `kind` (its field number in Operation's
// oneof), one letter per field in field-number order: 'r' request id, 'q'
// int64, 'w' int32, 'b' bool (those three in args), 'h' hash (in hashes),
// 'H' repeated hash (length in args, elements in hashes), 'p' repeated
// MidstepPosition (length in args, then each element's position in args and
// hash in hashes).
// Empty for kinds without fields, "?" for a kind Operation does not have.
std::string_view PackedLayout(int kind);

// Checks a packed pass's structure before anything runs: every kind known,
// every column used up exactly by the kinds, no negative length, each value
// within its field's range.
// Errors: INVALID_ARGUMENT naming the operation and the column.
absl::Status ValidatePackedOperations(const v1::PackedOperations& packed);

// Reads a validated PackedOperations in order: for each operation, the Read
// overload for its kind (packed.kinds(i)), which replaces every field of
// `out` but request_id.
class PackedOperationReader {
 public:
  // REQUIRES: ValidatePackedOperations(packed).ok(); `packed` outlives this.
  explicit PackedOperationReader(const v1::PackedOperations& packed)
      : packed_(packed) {}

  // Each REQUIRES: the next operation is the overload's kind. A kind that names
  // a request returns its id, a view into the request_ids column (valid while
  // `packed` is), and leaves out->request_id() alone: the daemon looks the
  // request up by the view, so no id is copied.
  void Read(v1::BeginPass* out);
  std::string_view Read(v1::Admit* out);
  void Read(v1::ResumableHit* out);
  void Read(v1::Lookup* out);
  std::string_view Read(v1::Reserve* out);
  std::string_view Read(v1::Publish* out);
  std::string_view Read(v1::Cancel* out);
  std::string_view Read(v1::Checkpoint* out);
  std::string_view Read(v1::ConsumeFork* out);
  std::string_view Read(v1::AdoptForkSource* out);
  std::string_view Read(v1::Release* out);
  void Read(v1::Unindex* out);
  void Read(v1::ClearIndex* out);
  std::string_view Read(v1::Copy* out);
  std::string_view Read(v1::Snapshot* out);

 private:
  std::string_view NextId();
  int64_t NextArg() { return packed_.args(arg_++); }
  int64_t NextHash() { return packed_.hashes(hash_++); }
  // Replaces `out` with the next `n` hashes.
  void NextHashes(int64_t n, google::protobuf::RepeatedField<int64_t>* out) {
    const int64_t* p = packed_.hashes().data() + hash_;
    hash_ += static_cast<int>(n);
    out->Clear();
    out->Add(p, p + n);
  }

  const v1::PackedOperations& packed_;
  int id_ = 0;
  size_t id_offset_ = 0;
  int arg_ = 0;
  int hash_ = 0;
};

// Appends operation results to a PackedResults, in order.
class PackedResultWriter {
 public:
  // `out` outlives this; it is appended to, not cleared.
  explicit PackedResultWriter(v1::PackedResults* out) : out_(out) {}

  // A refused operation: its code and message, nothing else.
  // REQUIRES: !status.ok().
  void Refused(const absl::Status& status);

  // A successful operation's result: code 0, then its fields.
  void Write(const v1::BeginPassResult& r);
  void Write(const v1::AdmitResult& r);
  void Write(const v1::ResumableHitResult& r);
  void Write(const v1::LookupResult& r);
  void Write(const v1::ReserveResult& r);
  void Write(const v1::PublishResult& r);
  void Write(const v1::CancelResult& r);
  void Write(const v1::CheckpointResult& r);
  void Write(const v1::ConsumeForkResult& r);
  void Write(const v1::AdoptForkSourceResult& r);
  void Write(const v1::ReleaseResult& r);
  void Write(const v1::UnindexResult& r);
  void Write(const v1::ClearIndexResult& r);
  void Write(const v1::CopyResult& r);
  void Write(const v1::SnapshotResult& r);

 private:
  void Ok() { out_->add_codes(0); }
  void Value(int64_t v) { out_->add_values(v); }

  v1::PackedResults* out_;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_SERVICE_PACKED_PASS_H_
