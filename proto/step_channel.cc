#include "proto/step_channel.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "proto/status_mapping.h"

namespace statecache::step_channel {
namespace {

// Appends `count` elements of `column` at the next multiple of 8 of `out`.
template <typename T>
void AppendColumn(const T* column, size_t count, std::string* out) {
  out->resize(Align8(out->size()));
  out->append(reinterpret_cast<const char*>(column), count * sizeof(T));
}

// Reads columns laid out as AppendColumn wrote them, every count checked
// against the buffer's end before it is read.
class ColumnReader {
 public:
  ColumnReader(const char* base, size_t bytes, size_t at)
      : base_(base), bytes_(bytes), at_(at) {}

  // The next column of `count` elements, or null when it runs past the end.
  template <typename T>
  const T* Next(uint32_t count) {
    const size_t start = Align8(at_);
    if (start > bytes_ || count > (bytes_ - start) / sizeof(T)) return nullptr;
    at_ = start + size_t{count} * sizeof(T);
    return reinterpret_cast<const T*>(base_ + start);
  }

 private:
  const char* base_;
  size_t bytes_;
  size_t at_;
};

template <typename Field, typename T>
void Assign(const T* column, uint32_t count, Field* field) {
  static_assert(sizeof(*field->data()) == sizeof(T));
  field->Resize(static_cast<int>(count), 0);
  if (count > 0) std::memcpy(field->mutable_data(), column, count * sizeof(T));
}

}  // namespace

size_t WriteStepRequest(const v1::PackedOperations& packed, char* area,
                        size_t bytes) {
  RequestHeader header;
  header.command = kStep;
  header.kinds = static_cast<uint32_t>(packed.kinds_size());
  header.request_id_lengths =
      static_cast<uint32_t>(packed.request_id_lengths_size());
  header.request_ids = static_cast<uint32_t>(packed.request_ids().size());
  header.args = static_cast<uint32_t>(packed.args_size());
  header.hashes = static_cast<uint32_t>(packed.hashes_size());
  size_t at = kHeaderBytes;
  const auto place = [&](size_t count, size_t width) {
    const size_t start = Align8(at);
    at = start + count * width;
    return start;
  };
  const size_t args = place(header.args, 8);
  const size_t hashes = place(header.hashes, 8);
  const size_t kinds = place(header.kinds, 4);
  const size_t lengths = place(header.request_id_lengths, 4);
  const size_t ids = place(header.request_ids, 1);
  if (at > bytes) return 0;
  std::memcpy(area, &header, sizeof(header));
  const auto copy = [&](size_t offset, const void* data, size_t size) {
    if (size > 0) std::memcpy(area + offset, data, size);
  };
  copy(args, packed.args().data(), header.args * 8);
  copy(hashes, packed.hashes().data(), header.hashes * 8);
  copy(kinds, packed.kinds().data(), header.kinds * 4);
  copy(lengths, packed.request_id_lengths().data(),
       header.request_id_lengths * 4);
  copy(ids, packed.request_ids().data(), header.request_ids);
  return at;
}

void WriteCommand(Command command, char* area) {
  RequestHeader header;
  header.command = command;
  std::memcpy(area, &header, sizeof(header));
}

absl::Status ReadStepRequest(const char* area, size_t bytes,
                             v1::PackedOperations* packed) {
  if (bytes < kHeaderBytes) {
    return absl::InvalidArgumentError("step channel: request area too small");
  }
  RequestHeader header;
  std::memcpy(&header, area, sizeof(header));
  ColumnReader reader(area, bytes, kHeaderBytes);
  const auto* args = reader.Next<int64_t>(header.args);
  const auto* hashes = args ? reader.Next<int64_t>(header.hashes) : nullptr;
  const auto* kinds = hashes ? reader.Next<uint32_t>(header.kinds) : nullptr;
  const auto* lengths =
      kinds ? reader.Next<uint32_t>(header.request_id_lengths) : nullptr;
  const auto* ids = lengths ? reader.Next<char>(header.request_ids) : nullptr;
  if (ids == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step channel: the request's columns (kinds ", header.kinds,
        ", request_id_lengths ", header.request_id_lengths, ", request_ids ",
        header.request_ids, " bytes, args ", header.args, ", hashes ",
        header.hashes, ") overrun the request area of ", bytes, " bytes"));
  }
  // Counts past int's range cannot fit an area a daemon maps, but a
  // RepeatedField is sized by int: say so rather than wrap.
  for (uint32_t count :
       {header.args, header.hashes, header.kinds, header.request_id_lengths}) {
    if (count > static_cast<uint32_t>(INT32_MAX)) {
      return absl::InvalidArgumentError("step channel: a column too long");
    }
  }
  Assign(args, header.args, packed->mutable_args());
  Assign(hashes, header.hashes, packed->mutable_hashes());
  Assign(kinds, header.kinds, packed->mutable_kinds());
  Assign(lengths, header.request_id_lengths,
         packed->mutable_request_id_lengths());
  packed->mutable_request_ids()->assign(ids, header.request_ids);
  return absl::OkStatus();
}

void EncodeReply(const absl::Status& status, const v1::StepResponse& response,
                 std::string* out) {
  out->clear();
  ReplyHeader header;
  header.epoch = response.epoch();
  if (!status.ok()) {
    header.status = static_cast<uint32_t>(ToWireCode(status));
    header.status_message = static_cast<uint32_t>(status.message().size());
    out->append(kHeaderBytes, '\0');
    AppendColumn(status.message().data(), status.message().size(), out);
  } else {
    const v1::PackedResults& r = response.packed_results();
    header.codes = static_cast<uint32_t>(r.codes_size());
    header.values = static_cast<uint32_t>(r.values_size());
    header.late_values = static_cast<uint32_t>(r.late_values_size());
    header.hashes = static_cast<uint32_t>(r.hashes_size());
    header.request_id_lengths =
        static_cast<uint32_t>(r.request_id_lengths_size());
    header.request_ids = static_cast<uint32_t>(r.request_ids().size());
    header.messages = static_cast<uint32_t>(r.messages_size());
    out->append(kHeaderBytes, '\0');
    AppendColumn(r.values().data(), r.values_size(), out);
    AppendColumn(r.late_values().data(), r.late_values_size(), out);
    AppendColumn(r.hashes().data(), r.hashes_size(), out);
    AppendColumn(r.codes().data(), r.codes_size(), out);
    AppendColumn(r.request_id_lengths().data(), r.request_id_lengths_size(),
                 out);
    out->resize(Align8(out->size()));
    for (const std::string& message : r.messages()) {
      const auto length = static_cast<uint32_t>(message.size());
      out->append(reinterpret_cast<const char*>(&length), sizeof(length));
      header.message_bytes += length;
    }
    AppendColumn(r.request_ids().data(), r.request_ids().size(), out);
    out->resize(Align8(out->size()));
    for (const std::string& message : r.messages()) out->append(message);
  }
  header.total_bytes = out->size();
  std::memcpy(out->data(), &header, sizeof(header));
}

absl::Status DecodeReply(std::string_view reply, v1::StepResponse* response) {
  response->Clear();
  if (reply.size() < kHeaderBytes) {
    return absl::InternalError("step channel: a reply shorter than a header");
  }
  ReplyHeader header;
  std::memcpy(&header, reply.data(), sizeof(header));
  if (header.total_bytes != reply.size()) {
    return absl::InternalError("step channel: a reply of the wrong length");
  }
  response->set_epoch(header.epoch);
  ColumnReader reader(reply.data(), reply.size(), kHeaderBytes);
  if (header.status != 0) {
    const char* message = reader.Next<char>(header.status_message);
    if (message == nullptr) {
      return absl::InternalError("step channel: a refusal's message overruns");
    }
    const absl::Status refusal = FromWireCode(
        header.status, absl::string_view(message, header.status_message));
    if (refusal.ok()) {
      return absl::InternalError("step channel: a refusal with code 0");
    }
    return refusal;
  }
  const auto* values = reader.Next<int64_t>(header.values);
  const auto* late =
      values ? reader.Next<int64_t>(header.late_values) : nullptr;
  const auto* hashes = late ? reader.Next<int64_t>(header.hashes) : nullptr;
  const auto* codes = hashes ? reader.Next<uint32_t>(header.codes) : nullptr;
  const auto* lengths =
      codes ? reader.Next<uint32_t>(header.request_id_lengths) : nullptr;
  const auto* message_lengths =
      lengths ? reader.Next<uint32_t>(header.messages) : nullptr;
  const auto* ids =
      message_lengths ? reader.Next<char>(header.request_ids) : nullptr;
  const auto* messages =
      ids ? reader.Next<char>(header.message_bytes) : nullptr;
  if (messages == nullptr) {
    return absl::InternalError("step channel: a reply's columns overrun it");
  }
  v1::PackedResults* r = response->mutable_packed_results();
  Assign(values, header.values, r->mutable_values());
  Assign(late, header.late_values, r->mutable_late_values());
  Assign(hashes, header.hashes, r->mutable_hashes());
  Assign(codes, header.codes, r->mutable_codes());
  Assign(lengths, header.request_id_lengths, r->mutable_request_id_lengths());
  r->mutable_request_ids()->assign(ids, header.request_ids);
  uint64_t at = 0;
  for (uint32_t i = 0; i < header.messages; ++i) {
    if (message_lengths[i] > header.message_bytes - at) {
      return absl::InternalError("step channel: a reply's messages overrun");
    }
    r->add_messages()->assign(messages + at, message_lengths[i]);
    at += message_lengths[i];
  }
  if (at != header.message_bytes) {
    return absl::InternalError("step channel: a reply's messages fall short");
  }
  return absl::OkStatus();
}

void FutexWait(uint32_t* word, uint32_t expected, absl::Duration timeout) {
  const timespec limit = absl::ToTimespec(timeout);
  // Shared (not FUTEX_PRIVATE): the other side is another process. EAGAIN
  // (the word moved on), EINTR and ETIMEDOUT all mean: look again.
  ::syscall(SYS_futex, word, FUTEX_WAIT, expected, &limit, nullptr, 0);
}

void FutexWake(uint32_t* word) {
  ::syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace statecache::step_channel
