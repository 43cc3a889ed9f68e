// The packed (columnar) form of a Step, both directions of both halves: the
// operations (PackedOperations) and their results (PackedResults), each read
// into and written from the kind's own v1 message. The layout rule is in
// statecache.proto (PackedOperations): a message's fields in field-number
// order, request ids in one column, hashes in another, every other value in
// args (values, for results).
//
// Every kind's layout is written once, in packed_codec.cc (one table: each
// field of each message with its rule); every reader and writer here walks
// that table, and PackedLayout's letters are derived from it. The daemon,
// the C++ client, proto/packed_form.h and the tools all use these classes,
// so there is no second copy of a layout to drift (tests/proto checks the
// table against the .proto's descriptors).
//
// The daemon's path (ValidatePackedOperations, PackedOperationReader,
// PackedResultWriter) reads and writes the columns directly: no reflection,
// and no allocation per operation once the messages it reuses are warm.
//
// Thread-safety: none of these classes is; each call uses its own.
#ifndef STATECACHE_PROTO_PACKED_CODEC_H_
#define STATECACHE_PROTO_PACKED_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "proto/statecache/v1/statecache.pb.h"

namespace statecache {

// Where a reader stands in the columns a layout reads (internal to the
// readers below).
struct PackedCursor {
  int id = 0;            // into request_id_lengths
  size_t id_offset = 0;  // into request_ids
  int value = 0;         // into args (operations) or values (results)
  int hash = 0;          // into hashes
  int late = 0;          // into late_values (results)
};

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

  // The next operation, of kind `kind`, as the list form: `out` (cleared
  // first) gets that kind set, request_id included.
  // REQUIRES: the next operation is of kind `kind`.
  void Read(uint32_t kind, v1::Operation* out);

 private:
  const v1::PackedOperations& packed_;
  PackedCursor at_;
};

// Appends operations to a PackedOperations, in order: the kind, then its
// fields. The inverse of PackedOperationReader, and like it per kind: a kind
// that names a request takes its id apart (the message's request_id is not
// read: a builder keeps one message per kind, reused, and never copies an id
// into it); the list form's Write(Operation) takes it from the message.
class PackedOperationWriter {
 public:
  // `out` outlives this; it is appended to, not cleared.
  explicit PackedOperationWriter(v1::PackedOperations* out) : out_(out) {}

  void Write(const v1::BeginPass& op);
  void Write(std::string_view request_id, const v1::Admit& op);
  void Write(const v1::ResumableHit& op);
  void Write(const v1::Lookup& op);
  void Write(std::string_view request_id, const v1::Reserve& op);
  void Write(std::string_view request_id, const v1::Publish& op);
  void Write(std::string_view request_id, const v1::Cancel& op);
  void Write(std::string_view request_id, const v1::Checkpoint& op);
  void Write(std::string_view request_id, const v1::ConsumeFork& op);
  void Write(std::string_view request_id, const v1::AdoptForkSource& op);
  void Write(std::string_view request_id, const v1::Release& op);
  void Write(const v1::Unindex& op);
  void Write(const v1::ClearIndex& op);
  void Write(std::string_view request_id, const v1::Copy& op);
  void Write(std::string_view request_id, const v1::Snapshot& op);

  // A list-form operation, whichever its kind, its request id (for a kind
  // that names one) from the message.
  // Errors: INVALID_ARGUMENT for an operation with no kind set.
  absl::Status Write(const v1::Operation& op);

 private:
  v1::PackedOperations* out_;
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

  // A list-form result: its code and message when refused (code != 0),
  // else code 0 and the fields of the kind it has.
  // Errors: INVALID_ARGUMENT for a successful result with no kind.
  absl::Status Write(const v1::OperationResult& r);

 private:
  v1::PackedResults* out_;
};

// Reads a PackedResults back in order, one operation at a time, each entry
// bounds-checked: a column too short (or a value out of its field's range)
// stops the reader, and status() says which; nothing past a column's end is
// read. For a daemon's answer, which a client checks rather than trusts.
//
// Per operation: Next(), then, when it is OK, the Read overload of the
// operation's kind; or Read(kind, OperationResult*) for both.
class PackedResultReader {
 public:
  // `packed` outlives this.
  explicit PackedResultReader(const v1::PackedResults& packed)
      : packed_(packed) {}

  // The next operation's outcome: OK (its result follows: Read it), or its
  // refusal (code and message; a code beyond google.rpc.Code's is UNKNOWN,
  // the number kept in the message). An exhausted codes or messages column
  // stops the reader: then OK is returned and ok() is false.
  absl::Status Next();

  // The next result's fields into `out` (replacing them). False once the
  // reader has stopped.
  bool Read(v1::BeginPassResult* out);
  bool Read(v1::AdmitResult* out);
  bool Read(v1::ResumableHitResult* out);
  bool Read(v1::LookupResult* out);
  bool Read(v1::ReserveResult* out);
  bool Read(v1::PublishResult* out);
  bool Read(v1::CancelResult* out);
  bool Read(v1::CheckpointResult* out);
  bool Read(v1::ConsumeForkResult* out);
  bool Read(v1::AdoptForkSourceResult* out);
  bool Read(v1::ReleaseResult* out);
  bool Read(v1::UnindexResult* out);
  bool Read(v1::ClearIndexResult* out);
  bool Read(v1::CopyResult* out);
  bool Read(v1::SnapshotResult* out);

  // The next operation, of kind `kind` (the request's kinds(i)), as the list
  // form: `out` (cleared first) gets its code and message, or code 0 and the
  // result of its kind. False once the reader has stopped (an unknown kind
  // stops it too).
  bool Read(uint32_t kind, v1::OperationResult* out);

  // False once a column ran short or a value was out of range.
  bool ok() const { return error_ == nullptr; }
  // OK while ok(); else INVALID_ARGUMENT naming the column and operation.
  absl::Status status() const;
  // After the last operation: status(), or INVALID_ARGUMENT when a column
  // holds more than the operations used.
  absl::Status Finish() const;

 private:
  // The next code, and its message when it is not 0. False (the reader
  // stopped) when either column is exhausted.
  bool NextCode(uint32_t* code, const std::string** message);
  template <typename Result>
  bool ReadResult(Result* out);

  const v1::PackedResults& packed_;
  PackedCursor at_;
  int op_ = 0;  // operations begun (Next calls)
  int message_ = 0;
  // What stopped the reader; null while ok().
  const char* error_ = nullptr;
};

}  // namespace statecache

#endif  // STATECACHE_PROTO_PACKED_CODEC_H_
