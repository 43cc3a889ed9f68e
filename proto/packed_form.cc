#include "proto/packed_form.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace statecache {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using google::protobuf::RepeatedField;

// A message's fields in field-number order (the layout rule's order).
std::vector<const FieldDescriptor*> FieldsByNumber(const Descriptor* d) {
  std::vector<const FieldDescriptor*> fields;
  for (int i = 0; i < d->field_count(); ++i) fields.push_back(d->field(i));
  std::sort(fields.begin(), fields.end(), [](const auto* a, const auto* b) {
    return a->number() < b->number();
  });
  return fields;
}

// The columns a message's fields go to.
struct Columns {
  std::string* ids;
  RepeatedField<uint32_t>* lengths;
  RepeatedField<int64_t>* values;
  RepeatedField<int64_t>* hashes;
};

// The rule's hashes: fields named `hash`, and repeated `hashes` and
// `block_hashes`.
bool IsHash(const FieldDescriptor* f) {
  return f->name() == "hash" || f->name() == "hashes" ||
         f->name() == "block_hashes";
}

int64_t Scalar(const Reflection* r, const Message& m, const FieldDescriptor* f,
               int index) {
  const bool rep = index >= 0;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f);
    case FieldDescriptor::CPPTYPE_INT64:
      return rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f);
    case FieldDescriptor::CPPTYPE_UINT32:
      return rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f);
    case FieldDescriptor::CPPTYPE_UINT64:
      return static_cast<int64_t>(rep ? r->GetRepeatedUInt64(m, f, index)
                                      : r->GetUInt64(m, f));
    case FieldDescriptor::CPPTYPE_BOOL:
      return (rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f)) ? 1 : 0;
    case FieldDescriptor::CPPTYPE_ENUM:
      return rep ? r->GetRepeatedEnumValue(m, f, index) : r->GetEnumValue(m, f);
    default:
      return 0;  // strings and messages are not scalars
  }
}

void Append(const Message& m, const Columns& c) {
  const Reflection* r = m.GetReflection();
  for (const FieldDescriptor* f : FieldsByNumber(m.GetDescriptor())) {
    const bool is_message = f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    const bool is_string = f->cpp_type() == FieldDescriptor::CPPTYPE_STRING;
    if (f->is_repeated()) {
      const int n = r->FieldSize(m, f);
      c.values->Add(n);
      for (int k = 0; k < n; ++k) {
        if (is_message) {
          Append(r->GetRepeatedMessage(m, f, k), c);
        } else {
          (IsHash(f) ? c.hashes : c.values)->Add(Scalar(r, m, f, k));
        }
      }
    } else if (is_string) {
      const std::string s = r->GetString(m, f);
      c.ids->append(s);
      c.lengths->Add(static_cast<uint32_t>(s.size()));
    } else if (is_message) {
      Append(r->GetMessage(m, f), c);
    } else {
      (IsHash(f) ? c.hashes : c.values)->Add(Scalar(r, m, f, -1));
    }
  }
}

// Reads the columns back in order, checking each step.
struct Cursor {
  const std::string& ids;
  const RepeatedField<uint32_t>& lengths;
  const RepeatedField<int64_t>& values;
  const RepeatedField<int64_t>& hashes;
  int id = 0;
  size_t id_offset = 0;
  int value = 0;
  int hash = 0;

  absl::Status NextValue(int64_t* v) {
    if (value >= values.size()) {
      return absl::InvalidArgumentError(
          "packed: the args/values column is too short");
    }
    *v = values[value++];
    return absl::OkStatus();
  }
  absl::Status NextHash(int64_t* v) {
    if (hash >= hashes.size()) {
      return absl::InvalidArgumentError(
          "packed: the hashes column is too short");
    }
    *v = hashes[hash++];
    return absl::OkStatus();
  }
  // The next scalar of field f, from its column.
  absl::Status Next(const FieldDescriptor* f, int64_t* v) {
    return IsHash(f) ? NextHash(v) : NextValue(v);
  }
};

absl::Status SetScalar(const Reflection* r, Message* m,
                       const FieldDescriptor* f, int64_t v) {
  const bool rep = f->is_repeated();
  auto range = [&](int64_t lo, int64_t hi) -> absl::Status {
    if (v < lo || v > hi) {
      return absl::InvalidArgumentError(absl::StrCat(
          "packed: value ", v, " out of range for ", f->full_name()));
    }
    return absl::OkStatus();
  };
  absl::Status s;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      s = range(std::numeric_limits<int32_t>::min(),
                std::numeric_limits<int32_t>::max());
      if (!s.ok()) return s;
      rep ? r->AddInt32(m, f, static_cast<int32_t>(v))
          : r->SetInt32(m, f, static_cast<int32_t>(v));
      return s;
    case FieldDescriptor::CPPTYPE_INT64:
      rep ? r->AddInt64(m, f, v) : r->SetInt64(m, f, v);
      return s;
    case FieldDescriptor::CPPTYPE_UINT32:
      s = range(0, std::numeric_limits<uint32_t>::max());
      if (!s.ok()) return s;
      rep ? r->AddUInt32(m, f, static_cast<uint32_t>(v))
          : r->SetUInt32(m, f, static_cast<uint32_t>(v));
      return s;
    case FieldDescriptor::CPPTYPE_UINT64:
      rep ? r->AddUInt64(m, f, static_cast<uint64_t>(v))
          : r->SetUInt64(m, f, static_cast<uint64_t>(v));
      return s;
    case FieldDescriptor::CPPTYPE_BOOL:
      s = range(0, 1);
      if (!s.ok()) return s;
      rep ? r->AddBool(m, f, v != 0) : r->SetBool(m, f, v != 0);
      return s;
    default:
      return absl::InternalError(
          absl::StrCat("packed: no scalar rule for ", f->full_name()));
  }
}

absl::Status Read(Cursor& c, Message* m) {
  const Reflection* r = m->GetReflection();
  for (const FieldDescriptor* f : FieldsByNumber(m->GetDescriptor())) {
    const bool is_message = f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    const bool is_string = f->cpp_type() == FieldDescriptor::CPPTYPE_STRING;
    if (f->is_repeated()) {
      int64_t n = 0;
      if (absl::Status s = c.NextValue(&n); !s.ok()) return s;
      if (n < 0 ||
          n > std::max(c.values.size() - c.value, c.hashes.size() - c.hash)) {
        return absl::InvalidArgumentError(
            absl::StrCat("packed: length ", n, " of ", f->full_name(),
                         " is negative or runs past the values"));
      }
      for (int64_t k = 0; k < n; ++k) {
        if (is_message) {
          if (absl::Status s = Read(c, r->AddMessage(m, f)); !s.ok()) return s;
        } else {
          int64_t v = 0;
          if (absl::Status s = c.Next(f, &v); !s.ok()) return s;
          if (absl::Status s = SetScalar(r, m, f, v); !s.ok()) return s;
        }
      }
    } else if (is_string) {
      if (c.id >= c.lengths.size() ||
          c.lengths[c.id] > c.ids.size() - c.id_offset) {
        return absl::InvalidArgumentError(
            "packed: the request id columns are too short");
      }
      r->SetString(m, f, c.ids.substr(c.id_offset, c.lengths[c.id]));
      c.id_offset += c.lengths[c.id++];
    } else if (is_message) {
      if (absl::Status s = Read(c, r->MutableMessage(m, f)); !s.ok()) return s;
    } else {
      int64_t v = 0;
      if (absl::Status s = c.Next(f, &v); !s.ok()) return s;
      if (absl::Status s = SetScalar(r, m, f, v); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status UsedUp(const Cursor& c) {
  if (c.value != c.values.size() || c.hash != c.hashes.size() ||
      c.id != c.lengths.size() || c.id_offset != c.ids.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "packed: columns longer than the kinds use (args/values ", c.value, "/",
        c.values.size(), ", hashes ", c.hash, "/", c.hashes.size(), ", ids ",
        c.id, "/", c.lengths.size(), ")"));
  }
  return absl::OkStatus();
}

// The result oneof's field for an operation kind: the one with its name.
const FieldDescriptor* ResultFieldFor(const FieldDescriptor* op_field) {
  return v1::OperationResult::descriptor()->FindFieldByName(op_field->name());
}

}  // namespace

absl::Status PackOperations(
    const google::protobuf::RepeatedPtrField<v1::Operation>& operations,
    v1::PackedOperations* packed) {
  packed->Clear();
  const Columns c{packed->mutable_request_ids(),
                  packed->mutable_request_id_lengths(), packed->mutable_args(),
                  packed->mutable_hashes()};
  const Reflection* r = v1::Operation::GetReflection();
  for (int i = 0; i < operations.size(); ++i) {
    const v1::Operation& op = operations[i];
    if (op.kind_case() == v1::Operation::KIND_NOT_SET) {
      return absl::InvalidArgumentError(
          absl::StrCat("operation ", i, " has no kind set"));
    }
    const FieldDescriptor* f =
        v1::Operation::descriptor()->FindFieldByNumber(op.kind_case());
    packed->add_kinds(static_cast<uint32_t>(op.kind_case()));
    Append(r->GetMessage(op, f), c);
  }
  return absl::OkStatus();
}

absl::Status UnpackOperations(
    const v1::PackedOperations& packed,
    google::protobuf::RepeatedPtrField<v1::Operation>* operations) {
  operations->Clear();
  Cursor c{packed.request_ids(), packed.request_id_lengths(), packed.args(),
           packed.hashes()};
  const Reflection* r = v1::Operation::GetReflection();
  for (int i = 0; i < packed.kinds_size(); ++i) {
    const FieldDescriptor* f = v1::Operation::descriptor()->FindFieldByNumber(
        static_cast<int>(packed.kinds(i)));
    if (f == nullptr || f->containing_oneof() == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "packed: operation ", i, " has unknown kind ", packed.kinds(i)));
    }
    v1::Operation* op = operations->Add();
    if (absl::Status s = Read(c, r->MutableMessage(op, f)); !s.ok()) return s;
  }
  return UsedUp(c);
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
  Cursor c{packed.request_ids(), packed.request_id_lengths(), packed.values(),
           packed.hashes()};
  int message = 0;
  const Reflection* r = v1::OperationResult::GetReflection();
  for (int i = 0; i < kinds.size(); ++i) {
    v1::OperationResult* out = results->Add();
    out->set_code(static_cast<int32_t>(packed.codes(i)));
    if (packed.codes(i) != 0) {
      if (message >= packed.messages_size()) {
        return absl::InvalidArgumentError(
            "packed: fewer messages than refusals");
      }
      out->set_message(packed.messages(message++));
      continue;
    }
    const FieldDescriptor* op_field =
        v1::Operation::descriptor()->FindFieldByNumber(
            static_cast<int>(kinds[i]));
    const FieldDescriptor* f =
        op_field != nullptr ? ResultFieldFor(op_field) : nullptr;
    if (f == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "packed: operation ", i, " has unknown kind ", kinds[i]));
    }
    if (absl::Status s = Read(c, r->MutableMessage(out, f)); !s.ok()) return s;
  }
  if (message != packed.messages_size()) {
    return absl::InvalidArgumentError("packed: more messages than refusals");
  }
  return UsedUp(c);
}

absl::Status PackResults(
    const google::protobuf::RepeatedPtrField<v1::OperationResult>& results,
    v1::PackedResults* packed) {
  packed->Clear();
  const Columns c{packed->mutable_request_ids(),
                  packed->mutable_request_id_lengths(),
                  packed->mutable_values(), packed->mutable_hashes()};
  const Reflection* r = v1::OperationResult::GetReflection();
  for (int i = 0; i < results.size(); ++i) {
    const v1::OperationResult& res = results[i];
    packed->add_codes(static_cast<uint32_t>(res.code()));
    if (res.code() != 0) {
      packed->add_messages(res.message());
      continue;
    }
    if (res.result_case() == v1::OperationResult::RESULT_NOT_SET) {
      return absl::InvalidArgumentError(
          absl::StrCat("result ", i, " is OK but has no kind"));
    }
    const FieldDescriptor* f =
        v1::OperationResult::descriptor()->FindFieldByNumber(res.result_case());
    Append(r->GetMessage(res, f), c);
  }
  return absl::OkStatus();
}

}  // namespace statecache
