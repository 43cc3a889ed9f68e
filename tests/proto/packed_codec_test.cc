// The packed codec (proto/packed_codec.h) held to the layout rule as
// statecache.proto states it, read here off the messages' descriptors by
// reflection (the only place the rule is walked that way):
//  * PackedLayout's letters, per operation kind;
//  * random messages of every operation and result kind: the codec's
//    writers write exactly the columns the rule gives, and its readers read
//    those columns back into the same messages;
//  * columns spoiled at random: the codec's checks (ValidatePackedOperations
//    for operations, PackedResultReader for results) accept exactly what a
//    reader of the rule can read to the end, using every column up.
#include "proto/packed_codec.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/packed_form.h"
#include "proto/statecache/v1/statecache.pb.h"

namespace statecache {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using google::protobuf::RepeatedField;

// ------------------------------------------------------------------ the rule

// A message's fields in field-number order (the layout rule's order),
// without those numbered 100 and above (the list form's only).
std::vector<const FieldDescriptor*> FieldsByNumber(const Descriptor* d) {
  std::vector<const FieldDescriptor*> fields;
  for (int i = 0; i < d->field_count(); ++i) {
    if (d->field(i)->number() < 100) fields.push_back(d->field(i));
  }
  std::sort(fields.begin(), fields.end(), [](const auto* a, const auto* b) {
    return a->number() < b->number();
  });
  return fields;
}

// A result's fields numbered 100 and above, in field-number order: what
// PackedResults.late_values carries for it.
std::vector<const FieldDescriptor*> LateFieldsByNumber(const Descriptor* d) {
  std::vector<const FieldDescriptor*> fields;
  for (int i = 0; i < d->field_count(); ++i) {
    if (d->field(i)->number() >= 100) fields.push_back(d->field(i));
  }
  std::sort(fields.begin(), fields.end(), [](const auto* a, const auto* b) {
    return a->number() < b->number();
  });
  return fields;
}

// The rule's hashes: fields named `hash`, and repeated `hashes` and
// `block_hashes`.
bool IsHash(const FieldDescriptor* f) {
  return f->name() == "hash" || f->name() == "hashes" ||
         f->name() == "block_hashes";
}

// The rule, from the descriptor: what PackedLayout must say for a message.
std::string LayoutByRule(const Descriptor* d) {
  std::string out;
  for (const FieldDescriptor* f : FieldsByNumber(d)) {
    if (f->is_repeated() && f->message_type() != nullptr) {
      // Only reserve's positions: (position in args, hash in hashes).
      EXPECT_EQ(f->message_type()->full_name(),
                "statecache.v1.MidstepPosition");
      out += 'p';
    } else if (f->is_repeated()) {
      EXPECT_TRUE(f->name() == "hashes" || f->name() == "block_hashes")
          << f->full_name();
      out += 'H';
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
      out += 'r';
    } else if (f->name() == "hash") {
      out += 'h';
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_INT64) {
      out += 'q';
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_INT32) {
      out += 'w';
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_BOOL) {
      out += 'b';
    } else {
      ADD_FAILURE() << "no rule for " << f->full_name();
    }
  }
  return out;
}

TEST(PackedLayoutTest, EveryKindFollowsTheRule) {
  const google::protobuf::OneofDescriptor* kinds =
      v1::Operation::descriptor()->FindOneofByName("kind");
  ASSERT_NE(kinds, nullptr);
  for (int i = 0; i < kinds->field_count(); ++i) {
    const FieldDescriptor* f = kinds->field(i);
    SCOPED_TRACE(f->name());
    EXPECT_EQ(PackedLayout(f->number()), LayoutByRule(f->message_type()));
  }
  EXPECT_EQ(PackedLayout(0), "?");
  EXPECT_EQ(PackedLayout(kinds->field_count() + 1), "?");
  EXPECT_EQ(PackedLayout(-1), "?");
}

// Columns, for operations (values = args) and results alike.
struct Columns {
  std::string ids;
  RepeatedField<uint32_t> lengths;
  RepeatedField<int64_t> values;
  RepeatedField<int64_t> hashes;
  RepeatedField<int64_t> late;  // results' late_values
};

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
    default:
      ADD_FAILURE() << "no scalar rule for " << f->full_name();
      return 0;
  }
}

// The rule applied to `m`: its fields appended to the columns.
void AppendByRule(const Message& m, Columns& c) {
  const Reflection* r = m.GetReflection();
  for (const FieldDescriptor* f : FieldsByNumber(m.GetDescriptor())) {
    const bool is_message = f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    if (f->is_repeated()) {
      const int n = r->FieldSize(m, f);
      c.values.Add(n);
      for (int k = 0; k < n; ++k) {
        if (is_message) {
          AppendByRule(r->GetRepeatedMessage(m, f, k), c);
        } else {
          (IsHash(f) ? c.hashes : c.values).Add(Scalar(r, m, f, k));
        }
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
      const std::string s = r->GetString(m, f);
      c.ids += s;
      c.lengths.Add(static_cast<uint32_t>(s.size()));
    } else if (is_message) {
      AppendByRule(r->GetMessage(m, f), c);
    } else {
      (IsHash(f) ? c.hashes : c.values).Add(Scalar(r, m, f, -1));
    }
  }
}

// Reads columns back by the rule, checking every entry and every value's
// range; false at the first entry it cannot read.
class RuleReader {
 public:
  explicit RuleReader(const Columns& c) : c_(c) {}

  bool Read(Message* m) {
    const Reflection* r = m->GetReflection();
    for (const FieldDescriptor* f : FieldsByNumber(m->GetDescriptor())) {
      const bool is_message = f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
      if (f->is_repeated()) {
        int64_t n = 0;
        if (!Next(c_.values, value_, &n) || n < 0) return false;
        for (int64_t k = 0; k < n; ++k) {
          if (is_message) {
            if (!Read(r->AddMessage(m, f))) return false;
          } else if (!ReadScalar(r, m, f)) {
            return false;
          }
        }
      } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
        if (id_ >= c_.lengths.size() ||
            c_.lengths[id_] > c_.ids.size() - offset_) {
          return false;
        }
        r->SetString(m, f, c_.ids.substr(offset_, c_.lengths[id_]));
        offset_ += c_.lengths[id_++];
      } else if (!ReadScalar(r, m, f)) {
        return false;
      }
    }
    return true;
  }

  bool UsedUp() const {
    return value_ == c_.values.size() && hash_ == c_.hashes.size() &&
           id_ == c_.lengths.size() && offset_ == c_.ids.size();
  }

 private:
  static bool Next(const RepeatedField<int64_t>& column, int& at, int64_t* v) {
    if (at >= column.size()) return false;
    *v = column[at++];
    return true;
  }
  bool ReadScalar(const Reflection* r, Message* m, const FieldDescriptor* f) {
    int64_t v = 0;
    if (!(IsHash(f) ? Next(c_.hashes, hash_, &v) : Next(c_.values, value_, &v)))
      return false;
    const bool rep = f->is_repeated();
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        if (v < std::numeric_limits<int32_t>::min() ||
            v > std::numeric_limits<int32_t>::max()) {
          return false;
        }
        rep ? r->AddInt32(m, f, static_cast<int32_t>(v))
            : r->SetInt32(m, f, static_cast<int32_t>(v));
        return true;
      case FieldDescriptor::CPPTYPE_INT64:
        rep ? r->AddInt64(m, f, v) : r->SetInt64(m, f, v);
        return true;
      case FieldDescriptor::CPPTYPE_UINT64:
        rep ? r->AddUInt64(m, f, static_cast<uint64_t>(v))
            : r->SetUInt64(m, f, static_cast<uint64_t>(v));
        return true;
      case FieldDescriptor::CPPTYPE_BOOL:
        if (v != 0 && v != 1) return false;
        rep ? r->AddBool(m, f, v != 0) : r->SetBool(m, f, v != 0);
        return true;
      default:
        ADD_FAILURE() << "no scalar rule for " << f->full_name();
        return false;
    }
  }

  const Columns& c_;
  int value_ = 0;
  int hash_ = 0;
  int id_ = 0;
  size_t offset_ = 0;
};

// ------------------------------------------------------------ random input

// Fills every field of `m` at random: ids of 0..12 characters (some not
// ASCII),
// lists of 0..3 elements, each scalar anywhere in its type's range or near
// zero.
void RandomFill(std::mt19937_64& rng, Message* m) {
  const Reflection* r = m->GetReflection();
  auto scalar = [&](const FieldDescriptor* f) -> int64_t {
    const int64_t v = rng() % 4 == 0 ? static_cast<int64_t>(rng())
                                     : static_cast<int64_t>(rng() % 9) - 2;
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        return static_cast<int32_t>(v);
      case FieldDescriptor::CPPTYPE_BOOL:
        return v & 1;
      default:
        return v;
    }
  };
  for (const FieldDescriptor* f : FieldsByNumber(m->GetDescriptor())) {
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
      std::string s;
      for (int64_t n = rng() % 13; n > 0; --n) {
        if (rng() % 8 == 0) {
          s += "\u00e9";
        } else {
          s += static_cast<char>('a' + rng() % 26);
        }
      }
      r->SetString(m, f, s);
      continue;
    }
    const int n = f->is_repeated() ? static_cast<int>(rng() % 4) : 1;
    for (int k = 0; k < n; ++k) {
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        RandomFill(rng, f->is_repeated() ? r->AddMessage(m, f)
                                         : r->MutableMessage(m, f));
        continue;
      }
      const int64_t v = scalar(f);
      switch (f->cpp_type()) {
        case FieldDescriptor::CPPTYPE_INT32:
          f->is_repeated() ? r->AddInt32(m, f, static_cast<int32_t>(v))
                           : r->SetInt32(m, f, static_cast<int32_t>(v));
          break;
        case FieldDescriptor::CPPTYPE_INT64:
          f->is_repeated() ? r->AddInt64(m, f, v) : r->SetInt64(m, f, v);
          break;
        case FieldDescriptor::CPPTYPE_UINT64:
          f->is_repeated() ? r->AddUInt64(m, f, static_cast<uint64_t>(v))
                           : r->SetUInt64(m, f, static_cast<uint64_t>(v));
          break;
        case FieldDescriptor::CPPTYPE_BOOL:
          f->is_repeated() ? r->AddBool(m, f, v != 0)
                           : r->SetBool(m, f, v != 0);
          break;
        default:
          ADD_FAILURE() << "no random rule for " << f->full_name();
      }
    }
  }
}

// Sets every late field (numbered 100 and above) of a result: each a scalar
// that is not its default, so a late field the codec dropped shows. Draws
// nothing from the tests' random streams, which their expectations fit.
void FillLate(int32_t value, Message* m) {
  const Reflection* r = m->GetReflection();
  for (const FieldDescriptor* f : LateFieldsByNumber(m->GetDescriptor())) {
    ASSERT_FALSE(f->is_repeated()) << f->full_name();
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        r->SetInt32(m, f, value);
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        r->SetBool(m, f, true);
        break;
      default:
        ADD_FAILURE() << "no late rule for " << f->full_name();
    }
  }
}

// The oneof field of `kind` (Operation's field number) in `d`'s oneof: the
// operation itself, or the result of the same name.
const FieldDescriptor* KindField(const Descriptor* d, int kind) {
  const FieldDescriptor* op =
      v1::Operation::descriptor()->FindFieldByNumber(kind);
  return op == nullptr ? nullptr : d->FindFieldByName(op->name());
}

int NumKinds() {
  return v1::Operation::descriptor()->FindOneofByName("kind")->field_count();
}

// A random pass: `n` operations of random kinds, and a result for each
// (some refused).
struct RandomPass {
  google::protobuf::RepeatedPtrField<v1::Operation> operations;
  google::protobuf::RepeatedField<uint32_t> kinds;
  google::protobuf::RepeatedPtrField<v1::OperationResult> results;
};

RandomPass Random(std::mt19937_64& rng, int n) {
  RandomPass pass;
  for (int i = 0; i < n; ++i) {
    const int kind = 1 + static_cast<int>(rng() % NumKinds());
    pass.kinds.Add(kind);
    v1::Operation* op = pass.operations.Add();
    RandomFill(rng, op->GetReflection()->MutableMessage(
                        op, KindField(v1::Operation::descriptor(), kind)));
    v1::OperationResult* result = pass.results.Add();
    if (rng() % 5 == 0) {
      result->set_code(static_cast<int32_t>(1 + rng() % 16));
      result->set_message(absl::StrCat("refused ", i));
    } else {
      Message* kind_result = result->GetReflection()->MutableMessage(
          result, KindField(v1::OperationResult::descriptor(), kind));
      RandomFill(rng, kind_result);
      if (i % 2 == 1) FillLate(1 + i, kind_result);
    }
  }
  return pass;
}

// The rule's columns of a pass's operations.
Columns OperationColumns(const RandomPass& pass) {
  Columns c;
  for (const v1::Operation& op : pass.operations) {
    const Reflection* r = op.GetReflection();
    AppendByRule(
        r->GetMessage(op, KindField(op.GetDescriptor(), op.kind_case())), c);
  }
  return c;
}

// The rule's columns of a pass's successful results.
Columns ResultColumns(const RandomPass& pass, int i_end) {
  Columns c;
  for (int i = 0; i < i_end; ++i) {
    const v1::OperationResult& result = pass.results[i];
    if (result.code() != 0) continue;
    const Message& kind_result = result.GetReflection()->GetMessage(
        result,
        KindField(result.GetDescriptor(), static_cast<int>(pass.kinds[i])));
    AppendByRule(kind_result, c);
    for (const FieldDescriptor* f :
         LateFieldsByNumber(kind_result.GetDescriptor())) {
      c.late.Add(Scalar(kind_result.GetReflection(), kind_result, f, -1));
    }
  }
  return c;
}

void ExpectColumns(const Columns& want, const std::string& ids,
                   const RepeatedField<uint32_t>& lengths,
                   const RepeatedField<int64_t>& values,
                   const RepeatedField<int64_t>& hashes) {
  EXPECT_EQ(ids, want.ids);
  EXPECT_EQ(std::vector<uint32_t>(lengths.begin(), lengths.end()),
            std::vector<uint32_t>(want.lengths.begin(), want.lengths.end()));
  EXPECT_EQ(std::vector<int64_t>(values.begin(), values.end()),
            std::vector<int64_t>(want.values.begin(), want.values.end()));
  EXPECT_EQ(std::vector<int64_t>(hashes.begin(), hashes.end()),
            std::vector<int64_t>(want.hashes.begin(), want.hashes.end()));
}

// ------------------------------------------------------------------ tests

TEST(PackedCodecTest, WritersWriteTheRulesColumnsAndReadersReadThemBack) {
  std::mt19937_64 rng(20240601);
  for (int round = 0; round < 400; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    const RandomPass pass = Random(rng, 1 + static_cast<int>(rng() % 40));

    // Operations: the list through the codec, as the rule has them.
    v1::PackedOperations packed;
    ASSERT_TRUE(PackOperations(pass.operations, &packed).ok());
    EXPECT_EQ(
        std::vector<uint32_t>(packed.kinds().begin(), packed.kinds().end()),
        std::vector<uint32_t>(pass.kinds.begin(), pass.kinds.end()));
    const Columns want = OperationColumns(pass);
    ExpectColumns(want, packed.request_ids(), packed.request_id_lengths(),
                  packed.args(), packed.hashes());
    // Read back: the list form, and the typed reader's ids.
    ASSERT_TRUE(ValidatePackedOperations(packed).ok());
    google::protobuf::RepeatedPtrField<v1::Operation> back;
    ASSERT_TRUE(UnpackOperations(packed, &back).ok());
    ASSERT_EQ(back.size(), pass.operations.size());
    for (int i = 0; i < back.size(); ++i) {
      EXPECT_EQ(back[i].SerializeAsString(),
                pass.operations[i].SerializeAsString());
    }

    // Results: the same.
    v1::PackedResults results;
    ASSERT_TRUE(PackResults(pass.results, &results).ok());
    const Columns want_results = ResultColumns(pass, pass.results.size());
    ExpectColumns(want_results, results.request_ids(),
                  results.request_id_lengths(), results.values(),
                  results.hashes());
    EXPECT_EQ(std::vector<int64_t>(results.late_values().begin(),
                                   results.late_values().end()),
              std::vector<int64_t>(want_results.late.begin(),
                                   want_results.late.end()));
    for (int i = 0; i < pass.results.size(); ++i) {
      EXPECT_EQ(results.codes(i),
                static_cast<uint32_t>(pass.results[i].code()));
    }
    google::protobuf::RepeatedPtrField<v1::OperationResult> results_back;
    ASSERT_TRUE(UnpackResults(results, pass.kinds, &results_back).ok());
    ASSERT_EQ(results_back.size(), pass.results.size());
    for (int i = 0; i < results_back.size(); ++i) {
      EXPECT_EQ(results_back[i].SerializeAsString(),
                pass.results[i].SerializeAsString());
    }
  }
}

// The typed calls the daemon and the client make (one message per kind,
// reused; ids apart) read and write what the list-form calls do.
TEST(PackedCodecTest, TypedCallsMatchTheListForm) {
  std::mt19937_64 rng(77);
  const RandomPass pass = Random(rng, 3000);
  v1::PackedOperations list_packed;
  ASSERT_TRUE(PackOperations(pass.operations, &list_packed).ok());

  // Writing with the id apart: the message's own id is not read.
  v1::PackedOperations typed;
  PackedOperationWriter writer(&typed);
  for (const v1::Operation& op : pass.operations) {
    v1::Operation copy = op;
    const Message& kind = copy.GetReflection()->GetMessage(
        copy, KindField(copy.GetDescriptor(), copy.kind_case()));
    const FieldDescriptor* id =
        kind.GetDescriptor()->FindFieldByName("request_id");
    if (id == nullptr) {
      ASSERT_TRUE(writer.Write(copy).ok());
      continue;
    }
    const std::string request_id = kind.GetReflection()->GetString(kind, id);
    switch (copy.kind_case()) {
      case v1::Operation::kAdmit:
        copy.mutable_admit()->set_request_id("not this");
        writer.Write(request_id, copy.admit());
        break;
      case v1::Operation::kCheckpoint:
        copy.mutable_checkpoint()->clear_request_id();
        writer.Write(request_id, copy.checkpoint());
        break;
      case v1::Operation::kReserve:
        writer.Write(request_id, copy.reserve());
        break;
      default:
        ASSERT_TRUE(writer.Write(copy).ok());
    }
  }
  EXPECT_EQ(typed.SerializeAsString(), list_packed.SerializeAsString());

  // Reading into reused messages: every field replaced, the id a view.
  PackedOperationReader reader(typed);
  v1::Admit admit;
  v1::Reserve reserve;
  v1::Unindex unindex;
  for (const v1::Operation& op : pass.operations) {
    switch (op.kind_case()) {
      case v1::Operation::kAdmit:
        EXPECT_EQ(reader.Read(&admit), op.admit().request_id());
        admit.set_request_id(op.admit().request_id());
        EXPECT_EQ(admit.SerializeAsString(), op.admit().SerializeAsString());
        break;
      case v1::Operation::kReserve:
        EXPECT_EQ(reader.Read(&reserve), op.reserve().request_id());
        EXPECT_TRUE(reserve.request_id().empty());
        reserve.set_request_id(op.reserve().request_id());
        EXPECT_EQ(reserve.SerializeAsString(),
                  op.reserve().SerializeAsString());
        reserve.clear_request_id();
        break;
      case v1::Operation::kUnindex:
        reader.Read(&unindex);
        EXPECT_EQ(unindex.SerializeAsString(),
                  op.unindex().SerializeAsString());
        break;
      default: {
        v1::Operation back;
        reader.Read(static_cast<uint32_t>(op.kind_case()), &back);
        EXPECT_EQ(back.SerializeAsString(), op.SerializeAsString());
      }
    }
  }

  // Results: the typed writer and reader against the list form's.
  v1::PackedResults list_results;
  ASSERT_TRUE(PackResults(pass.results, &list_results).ok());
  v1::PackedResults typed_results;
  PackedResultWriter result_writer(&typed_results);
  for (const v1::OperationResult& r : pass.results) {
    if (r.code() != 0) {
      result_writer.Refused(
          absl::Status(static_cast<absl::StatusCode>(r.code()), r.message()));
    } else if (r.has_admit()) {
      result_writer.Write(r.admit());
    } else if (r.has_begin_pass()) {
      result_writer.Write(r.begin_pass());
    } else {
      ASSERT_TRUE(result_writer.Write(r).ok());
    }
  }
  EXPECT_EQ(typed_results.SerializeAsString(),
            list_results.SerializeAsString());
  PackedResultReader result_reader(typed_results);
  v1::AdmitResult admit_result;
  v1::ReserveResult reserve_result;
  for (int i = 0; i < pass.results.size(); ++i) {
    const v1::OperationResult& r = pass.results[i];
    if (r.code() == 0 && r.has_admit()) {
      ASSERT_TRUE(result_reader.Next().ok());
      ASSERT_TRUE(result_reader.Read(&admit_result));
      EXPECT_EQ(admit_result.SerializeAsString(),
                r.admit().SerializeAsString());
    } else if (r.code() == 0 && r.has_reserve()) {
      ASSERT_TRUE(result_reader.Next().ok());
      ASSERT_TRUE(result_reader.Read(&reserve_result));
      EXPECT_EQ(reserve_result.SerializeAsString(),
                r.reserve().SerializeAsString());
    } else if (r.code() != 0 && i % 2 == 0) {
      const absl::Status refusal = result_reader.Next();
      EXPECT_EQ(static_cast<int>(refusal.code()), r.code());
      EXPECT_EQ(refusal.message(), r.message());
    } else {
      v1::OperationResult back;
      ASSERT_TRUE(result_reader.Read(pass.kinds[i], &back));
      EXPECT_EQ(back.SerializeAsString(), r.SerializeAsString());
    }
  }
  EXPECT_TRUE(result_reader.Finish().ok()) << result_reader.Finish();
}

// Spoils one column entry (or adds or drops one) at random.
void Spoil(std::mt19937_64& rng, std::string* ids,
           RepeatedField<uint32_t>* lengths, RepeatedField<int64_t>* values,
           RepeatedField<int64_t>* hashes) {
  const int64_t bad[] = {-1, 0, 1, 2, 5, int64_t{1} << 40, -(int64_t{1} << 40)};
  switch (rng() % 6) {
    case 0:
      if (!values->empty()) {
        values->Set(static_cast<int>(rng() % values->size()), bad[rng() % 7]);
      }
      break;
    case 1:
      values->Add(static_cast<int64_t>(rng() % 3));
      break;
    case 2:
      if (!hashes->empty()) hashes->RemoveLast();
      break;
    case 3:
      if (!lengths->empty()) {
        lengths->Set(static_cast<int>(rng() % lengths->size()),
                     static_cast<uint32_t>(rng() % 8));
      }
      break;
    case 4:
      if (!values->empty()) values->RemoveLast();
      break;
    case 5:
      ids->push_back('x');
      break;
  }
}

TEST(PackedCodecTest, ChecksAcceptWhatTheRuleReads) {
  std::mt19937_64 rng(5);
  int valid = 0, invalid = 0;
  for (int round = 0; round < 6000; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    RandomPass pass = Random(rng, 1 + static_cast<int>(rng() % 6));
    // Operations, a kind sometimes changed too.
    v1::PackedOperations packed;
    ASSERT_TRUE(PackOperations(pass.operations, &packed).ok());
    Spoil(rng, packed.mutable_request_ids(),
          packed.mutable_request_id_lengths(), packed.mutable_args(),
          packed.mutable_hashes());
    if (rng() % 4 == 0) {
      packed.set_kinds(static_cast<int>(rng() % packed.kinds_size()),
                       static_cast<uint32_t>(rng() % (NumKinds() + 3)));
    }
    Columns c{packed.request_ids(),
              packed.request_id_lengths(),
              packed.args(),
              packed.hashes(),
              {}};
    RuleReader rule(c);
    bool rule_ok = true;
    for (uint32_t kind : packed.kinds()) {
      const FieldDescriptor* f =
          KindField(v1::Operation::descriptor(), static_cast<int>(kind));
      v1::Operation op;
      rule_ok = rule_ok && f != nullptr &&
                rule.Read(op.GetReflection()->MutableMessage(&op, f));
    }
    rule_ok = rule_ok && rule.UsedUp();
    ASSERT_EQ(ValidatePackedOperations(packed).ok(), rule_ok)
        << packed.ShortDebugString();
    (rule_ok ? valid : invalid) += 1;

    // Results.
    v1::PackedResults results;
    ASSERT_TRUE(PackResults(pass.results, &results).ok());
    Spoil(rng, results.mutable_request_ids(),
          results.mutable_request_id_lengths(), results.mutable_values(),
          results.mutable_hashes());
    Columns rc{results.request_ids(),
               results.request_id_lengths(),
               results.values(),
               results.hashes(),
               {}};
    RuleReader result_rule(rc);
    bool result_rule_ok = true;
    for (int i = 0; i < pass.kinds.size() && result_rule_ok; ++i) {
      if (results.codes(i) != 0) continue;
      v1::OperationResult r;
      result_rule_ok = result_rule.Read(r.GetReflection()->MutableMessage(
          &r, KindField(r.GetDescriptor(), static_cast<int>(pass.kinds[i]))));
    }
    result_rule_ok = result_rule_ok && result_rule.UsedUp();
    PackedResultReader reader(results);
    v1::OperationResult scratch;
    for (uint32_t kind : pass.kinds) {
      if (!reader.Read(kind, &scratch)) break;
    }
    ASSERT_EQ(reader.Finish().ok(), result_rule_ok)
        << reader.Finish() << "\n"
        << results.ShortDebugString();
  }
  // Spoiling found both outcomes often.
  EXPECT_GT(valid, 1000);
  EXPECT_GT(invalid, 1000);
}

// The tier's fields (numbered 100 and above) reached list-form
// clients only. late_values carries them; a daemon that predates it sends
// none, and the fields then read as their defaults.
TEST(PackedCodecTest, LateValuesCarryTheTierFieldsAndAreOptional) {
  google::protobuf::RepeatedPtrField<v1::OperationResult> list;
  google::protobuf::RepeatedField<uint32_t> kinds;
  v1::AdmitResult* admit = list.Add()->mutable_admit();
  admit->add_slots(3);
  admit->set_blocks_resumed(2);
  admit->set_adopted(true);
  admit->set_from_tier(true);
  admit->set_branch_blocks(4);
  admit->set_continuation_blocks(6);
  admit->set_ladder_blocks(16);
  kinds.Add(v1::Operation::kAdmit);
  list.Add()->mutable_resumable_hit()->set_tier_blocks(5);
  kinds.Add(v1::Operation::kResumableHit);
  v1::OperationResult* refused = list.Add();
  refused->set_code(5);
  refused->set_message("no");
  kinds.Add(v1::Operation::kLookup);
  v1::LookupResult* lookup = list.Add()->mutable_lookup();
  lookup->set_slot(-1);
  lookup->set_in_tier(true);
  kinds.Add(v1::Operation::kLookup);
  v1::PackedResults packed;
  ASSERT_TRUE(PackResults(list, &packed).ok());
  EXPECT_EQ(std::vector<int64_t>(packed.late_values().begin(),
                                 packed.late_values().end()),
            (std::vector<int64_t>{1, 4, 6, 16, 5, 1}));
  google::protobuf::RepeatedPtrField<v1::OperationResult> back;
  ASSERT_TRUE(UnpackResults(packed, kinds, &back).ok());
  EXPECT_TRUE(back[0].admit().from_tier());
  EXPECT_EQ(back[0].admit().branch_blocks(), 4);
  EXPECT_EQ(back[0].admit().continuation_blocks(), 6);
  EXPECT_EQ(back[0].admit().ladder_blocks(), 16);
  EXPECT_EQ(back[1].resumable_hit().tier_blocks(), 5);
  EXPECT_TRUE(back[3].lookup().in_tier());

  v1::PackedResults old = packed;  // a daemon before late_values
  old.clear_late_values();
  ASSERT_TRUE(UnpackResults(old, kinds, &back).ok());
  EXPECT_FALSE(back[0].admit().from_tier());
  EXPECT_EQ(back[1].resumable_hit().tier_blocks(), 0);
  EXPECT_EQ(back[0].admit().blocks_resumed(), 2);

  v1::PackedResults short_late = packed;
  short_late.mutable_late_values()->RemoveLast();
  absl::Status st = UnpackResults(short_late, kinds, &back);
  EXPECT_NE(st.message().find("late_values is too short"), std::string::npos)
      << st;
  v1::PackedResults not_bool = packed;
  not_bool.set_late_values(0, 2);
  st = UnpackResults(not_bool, kinds, &back);
  EXPECT_NE(st.message().find("not 0 or 1"), std::string::npos) << st;
  v1::PackedResults longer = packed;
  longer.add_late_values(1);
  st = UnpackResults(longer, kinds, &back);
  EXPECT_NE(st.message().find("late_values holds more"), std::string::npos)
      << st;
}

TEST(PackedCodecTest, ResultReaderNamesWhatRanShort) {
  v1::PackedResults packed;
  packed.add_codes(0);  // an admit: len(slots), slots..., then three values
  packed.add_values(2);
  packed.add_values(7);
  PackedResultReader reader(packed);
  v1::OperationResult out;
  EXPECT_FALSE(reader.Read(v1::Operation::kAdmit, &out));
  EXPECT_FALSE(reader.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(reader.status()));
  EXPECT_NE(reader.status().message().find(
                "operation 0: a length runs past the end of values"),
            std::string::npos)
      << reader.status();

  packed.Clear();
  packed.add_codes(9);
  PackedResultReader no_message(packed);
  EXPECT_FALSE(no_message.Read(v1::Operation::kRelease, &out));
  EXPECT_NE(no_message.status().message().find("fewer messages"),
            std::string::npos);

  packed.Clear();
  packed.add_codes(0);
  packed.add_values(1);
  packed.add_values(1);
  PackedResultReader longer(packed);
  EXPECT_TRUE(longer.Read(v1::Operation::kRelease, &out));
  EXPECT_EQ(out.release().slots_released(), 1);
  EXPECT_NE(longer.Finish().message().find("values holds more"),
            std::string::npos)
      << longer.Finish();
}

}  // namespace
}  // namespace statecache
