#include "proto/packed_form.h"

#include "absl/strings/str_cat.h"
#include "proto/packed_codec.h"

namespace statecache {
namespace {

// Writes every item with `writer`; an item it refuses is named ("operation
// 3 has no kind set").
template <typename Items, typename Writer>
absl::Status WriteAll(const Items& items, Writer writer, const char* what) {
  for (int i = 0; i < items.size(); ++i) {
    if (absl::Status s = writer.Write(items[i]); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", i, " ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PackOperations(
    const google::protobuf::RepeatedPtrField<v1::Operation>& operations,
    v1::PackedOperations* packed) {
  packed->Clear();
  return WriteAll(operations, PackedOperationWriter(packed), "operation");
}

absl::Status UnpackOperations(
    const v1::PackedOperations& packed,
    google::protobuf::RepeatedPtrField<v1::Operation>* operations) {
  operations->Clear();
  if (absl::Status s = ValidatePackedOperations(packed); !s.ok()) return s;
  PackedOperationReader reader(packed);
  for (uint32_t kind : packed.kinds()) reader.Read(kind, operations->Add());
  return absl::OkStatus();
}

absl::Status UnpackResults(
    const v1::PackedResults& packed,
    const google::protobuf::RepeatedField<uint32_t>& kinds,
    google::protobuf::RepeatedPtrField<v1::OperationResult>* results) {
  results->Clear();
  if (packed.codes_size() != kinds.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("packed: ", packed.codes_size(), " codes for ",
                     kinds.size(), " operations"));
  }
  PackedResultReader reader(packed);
  for (uint32_t kind : kinds) {
    if (!reader.Read(kind, results->Add())) return reader.status();
  }
  return reader.Finish();
}

absl::Status PackResults(
    const google::protobuf::RepeatedPtrField<v1::OperationResult>& results,
    v1::PackedResults* packed) {
  packed->Clear();
  return WriteAll(results, PackedResultWriter(packed), "result");
}

}  // namespace statecache
