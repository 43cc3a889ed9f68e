#include "client/statecache_client.h"

#include <google/protobuf/arena.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/from_proto.h"
#include "client/step_channel_client.h"
#include "proto/message_arena.h"
#include "proto/packed_codec.h"
#include "proto/statecache/v1/statecache.grpc.pb.h"
#include "proto/statecache/v1/statecache.pb.h"
#include "proto/status_mapping.h"

namespace statecache {
namespace {

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration timeout) {
  return absl::ToChronoTime(absl::Now() + timeout);
}

// One Step's request (the session id and the builder's packed operations)
// and its response, on one arena, freed at once.
//
// The request borrows the builder's columns instead of copying them:
// unsafe_arena_set_allocated files a pointer without taking ownership, and
// an arena never runs its messages' destructors, so the borrowed columns are
// neither changed nor freed. Only const methods (serialisation) run on them,
// which protobuf allows from several threads at once.
struct StepMessages {
  explicit StepMessages(const v1::PackedOperations& operations,
                        const std::string& session_id)
      : arena(MessageArenaOptions()),
        request(
            google::protobuf::Arena::CreateMessage<v1::StepRequest>(&arena)),
        response(
            google::protobuf::Arena::CreateMessage<v1::StepResponse>(&arena)) {
    request->set_session_id(session_id);
    request->unsafe_arena_set_allocated_packed(
        const_cast<v1::PackedOperations*>(&operations));
  }
  google::protobuf::Arena arena;
  v1::StepRequest* request;
  v1::StepResponse* response;
};

// What a PEM certificate's and a PEM private key's armour lines end with
// ("-----BEGIN CERTIFICATE-----", "-----BEGIN EC PRIVATE KEY-----", ...).
constexpr absl::string_view kCertificateMark = "CERTIFICATE-----";
constexpr absl::string_view kPrivateKeyMark = "PRIVATE KEY-----";

// How long Connect waits, after connect_timeout, for a TLS channel that did
// not connect to say why (a channel between attempts answers at once; one
// mid-handshake on a loaded machine can take a while).
constexpr absl::Duration kReasonWait = absl::Seconds(1);

bool IsUnixAddress(absl::string_view address) {
  return absl::StartsWith(address, "unix:") ||
         absl::StartsWith(address, "unix-abstract:");
}

// OK if `pem` holds a PEM certificate (`key` false) or private key (`key`
// true); else INVALID_ARGUMENT naming `what`. (A CSR, a key given as the
// certificate or the other way round would otherwise only fail once gRPC
// tries to connect, as "empty address list".)
absl::Status CheckPem(absl::string_view what, absl::string_view pem, bool key) {
  const absl::string_view mark = key ? kPrivateKeyMark : kCertificateMark;
  const size_t begin = pem.find("-----BEGIN ");
  if (begin != absl::string_view::npos &&
      pem.find(mark, begin) != absl::string_view::npos) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": not a PEM ", key ? "private key" : "certificate", " (no \"",
      key ? "-----BEGIN ... PRIVATE KEY-----" : "-----BEGIN CERTIFICATE-----",
      "\")"));
}

// The channel's credentials: plaintext, or TLS from `tls` (checked).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(
    const std::string& address, const std::optional<TlsOptions>& tls) {
  if (!tls.has_value()) return grpc::InsecureChannelCredentials();
  if (IsUnixAddress(address)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TLS is for TCP addresses; ", address,
        " is a Unix socket, which statecached serves in plaintext (the "
        "kernel names its peers)"));
  }
  if (tls->certificate_chain.empty() != tls->private_key.empty()) {
    return absl::InvalidArgumentError(
        "TlsOptions: certificate_chain and private_key go together: give "
        "both or neither");
  }
  if (!tls->root_certificates.empty()) {
    if (absl::Status s = CheckPem("TlsOptions::root_certificates",
                                  tls->root_certificates, /*key=*/false);
        !s.ok()) {
      return s;
    }
  }
  if (!tls->certificate_chain.empty()) {
    if (absl::Status s = CheckPem("TlsOptions::certificate_chain",
                                  tls->certificate_chain, /*key=*/false);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckPem("TlsOptions::private_key", tls->private_key,
                                  /*key=*/true);
        !s.ok()) {
      return s;
    }
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = tls->root_certificates;
  ssl.pem_cert_chain = tls->certificate_chain;
  ssl.pem_private_key = tls->private_key;
  return grpc::SslCredentials(ssl);
}

// Why `channel` (not connected) cannot connect, as gRPC reports its last
// attempt, from one fail-fast Ping: a channel in TRANSIENT_FAILURE fails it
// at once with that error. OK if the Ping went through.
absl::Status ConnectFailure(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(kReasonWait));
  v1::PingRequest request;
  v1::PingResponse response;
  const grpc::Status status =
      v1::StateCache::NewStub(channel)->Ping(&context, request, &response);
  if (status.ok()) return absl::OkStatus();
  const std::string message = status.error_message();  // returned by value
  absl::string_view reason = message;
  absl::ConsumePrefix(&reason, "failed to connect to all addresses; ");
  return absl::UnavailableError(
      reason.empty() ? std::string(absl::StatusCodeToString(
                           static_cast<absl::StatusCode>(status.error_code())))
                     : std::string(reason));
}

// A PEM file's contents (a certificate, or with `key` a private key), for
// TlsOptions::FromFiles.
absl::StatusOr<std::string> ReadPemFile(const std::string& path, bool key) {
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot be read: ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot be read"));
  }
  if (absl::Status s = CheckPem(path, text.str(), key); !s.ok()) return s;
  return text.str();
}

}  // namespace

// =============================================================== TlsOptions

absl::StatusOr<TlsOptions> TlsOptions::FromFiles(std::string_view ca_file,
                                                 std::string_view cert_file,
                                                 std::string_view key_file,
                                                 std::string server_name) {
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate and its key go together: give both or "
        "neither");
  }
  TlsOptions tls;
  tls.server_name = std::move(server_name);
  for (const auto& [path, out] : {std::pair<std::string_view, std::string*>{
                                      ca_file, &tls.root_certificates},
                                  {cert_file, &tls.certificate_chain},
                                  {key_file, &tls.private_key}}) {
    if (path.empty()) continue;
    absl::StatusOr<std::string> pem =
        ReadPemFile(std::string(path), out == &tls.private_key);
    if (!pem.ok()) return pem.status();
    *out = *std::move(pem);
  }
  return tls;
}

// =============================================================== StepBuilder

// The operations as the packed form's columns (PackedOperations in
// statecache.proto), written by the codec as they are added: sending a pass
// costs one copy per column instead of two messages and a string per
// operation.
struct StepBuilder::Rep {
  v1::PackedOperations packed;
  PackedOperationWriter writer{&packed};
  // A message of each kind with arguments besides the request id, reused:
  // each call fills its kind's message and the codec writes it out (the id
  // passed apart, never copied into the message).
  v1::Admit admit;
  v1::ResumableHit resumable_hit;
  v1::Lookup lookup;
  v1::Reserve reserve;
  v1::Publish publish;
  v1::Checkpoint checkpoint;
  v1::Unindex unindex;
  v1::Copy copy;
  v1::Snapshot snapshot;
};

StepBuilder::StepBuilder() : rep_(std::make_unique<Rep>()) {}
StepBuilder::~StepBuilder() = default;
StepBuilder::StepBuilder(StepBuilder&&) noexcept = default;
StepBuilder& StepBuilder::operator=(StepBuilder&&) noexcept = default;

size_t StepBuilder::size() const {
  return static_cast<size_t>(rep_->packed.kinds_size());
}

void StepBuilder::Clear() { rep_->packed.Clear(); }

StepBuilder& StepBuilder::BeginPass() {
  rep_->writer.Write(v1::BeginPass::default_instance());
  return *this;
}

StepBuilder& StepBuilder::Admit(std::string_view request_id, int32_t width,
                                int64_t num_tokens, int64_t anchor_pos,
                                absl::Span<const int64_t> block_hashes,
                                int32_t kv_hit_blocks) {
  v1::Admit& op = rep_->admit;
  op.set_width(width);
  op.set_num_tokens(num_tokens);
  op.set_anchor_pos(anchor_pos);
  op.mutable_block_hashes()->Assign(block_hashes.begin(), block_hashes.end());
  op.set_kv_hit_blocks(kv_hit_blocks);
  rep_->writer.Write(request_id, op);
  return *this;
}

StepBuilder& StepBuilder::ResumableHit(int64_t num_tokens,
                                       absl::Span<const int64_t> block_hashes,
                                       int32_t kv_hit_blocks,
                                       bool assume_checkpointed) {
  v1::ResumableHit& op = rep_->resumable_hit;
  op.set_num_tokens(num_tokens);
  op.mutable_block_hashes()->Assign(block_hashes.begin(), block_hashes.end());
  op.set_kv_hit_blocks(kv_hit_blocks);
  op.set_assume_checkpointed(assume_checkpointed);
  rep_->writer.Write(op);
  return *this;
}

StepBuilder& StepBuilder::Lookup(int64_t hash) {
  rep_->lookup.set_hash(hash);
  rep_->writer.Write(rep_->lookup);
  return *this;
}

StepBuilder& StepBuilder::Reserve(std::string_view request_id,
                                  absl::Span<const MidstepPosition> positions) {
  auto* out = rep_->reserve.mutable_positions();
  // Reuse the position messages already there (no allocation once warm).
  while (out->size() > static_cast<int>(positions.size())) out->RemoveLast();
  for (size_t k = 0; k < positions.size(); ++k) {
    v1::MidstepPosition* p = static_cast<int>(k) < out->size()
                                 ? out->Mutable(static_cast<int>(k))
                                 : out->Add();
    p->set_position(positions[k].position);
    p->set_hash(positions[k].hash);
  }
  rep_->writer.Write(request_id, rep_->reserve);
  return *this;
}

StepBuilder& StepBuilder::Publish(std::string_view request_id, bool keep_all) {
  rep_->publish.set_keep_all(keep_all);
  rep_->writer.Write(request_id, rep_->publish);
  return *this;
}

StepBuilder& StepBuilder::Cancel(std::string_view request_id) {
  rep_->writer.Write(request_id, v1::Cancel::default_instance());
  return *this;
}

StepBuilder& StepBuilder::Checkpoint(std::string_view request_id,
                                     int64_t boundary_blocks, int64_t hash,
                                     int64_t anchor_pos) {
  v1::Checkpoint& op = rep_->checkpoint;
  op.set_boundary_blocks(boundary_blocks);
  op.set_hash(hash);
  op.set_anchor_pos(anchor_pos);
  rep_->writer.Write(request_id, op);
  return *this;
}

StepBuilder& StepBuilder::ConsumeFork(std::string_view request_id) {
  rep_->writer.Write(request_id, v1::ConsumeFork::default_instance());
  return *this;
}

StepBuilder& StepBuilder::AdoptForkSource(std::string_view request_id) {
  rep_->writer.Write(request_id, v1::AdoptForkSource::default_instance());
  return *this;
}

StepBuilder& StepBuilder::Release(std::string_view request_id) {
  rep_->writer.Write(request_id, v1::Release::default_instance());
  return *this;
}

StepBuilder& StepBuilder::Unindex(absl::Span<const int64_t> hashes) {
  rep_->unindex.mutable_hashes()->Assign(hashes.begin(), hashes.end());
  rep_->writer.Write(rep_->unindex);
  return *this;
}

StepBuilder& StepBuilder::ClearIndex() {
  rep_->writer.Write(v1::ClearIndex::default_instance());
  return *this;
}

StepBuilder& StepBuilder::Copy(std::string_view request_id, int32_t from_index,
                               int32_t to_index) {
  rep_->copy.set_from_index(from_index);
  rep_->copy.set_to_index(to_index);
  rep_->writer.Write(request_id, rep_->copy);
  return *this;
}

StepBuilder& StepBuilder::Snapshot(std::string_view request_id,
                                   int64_t position, int64_t hash) {
  rep_->snapshot.set_position(position);
  rep_->snapshot.set_hash(hash);
  rep_->writer.Write(request_id, rep_->snapshot);
  return *this;
}

// =============================================================== Client

struct Client::Impl {
  using StepStreamRpc =
      grpc::ClientReaderWriter<v1::StepRequest, v1::StepResponse>;

  Impl(std::string address_in, ClientOptions options_in,
       std::shared_ptr<grpc::Channel> channel_in)
      : address(std::move(address_in)),
        options(options_in),
        channel(std::move(channel_in)),
        stub(v1::StateCache::NewStub(channel)),
        admin(v1::StateCacheAdmin::NewStub(channel)) {}

  ~Impl() {
    {
      absl::MutexLock lock(&mu);
      stopping = true;
      if (renewal_in_flight != nullptr) renewal_in_flight->TryCancel();
    }
    if (keepalive_thread.joinable()) keepalive_thread.join();
    absl::MutexLock lock(&stream_mu);
    // Cancel rather than half-close: destruction must not wait on a daemon
    // that stopped answering.
    if (stream != nullptr) {
      stream_context->TryCancel();
      stream->Finish().IgnoreError();
    }
  }

  // A context with the per-call deadline.
  void SetDeadline(grpc::ClientContext& context,
                   absl::Duration extra = absl::ZeroDuration()) const {
    context.set_deadline(DeadlineAfter(options.rpc_timeout + extra));
  }

  // The attached session's id and generation.
  // Errors: FAILED_PRECONDITION when none is attached.
  absl::StatusOr<std::pair<std::string, uint64_t>> CurrentSession() const
      ABSL_LOCKS_EXCLUDED(mu) {
    absl::MutexLock lock(&mu);
    if (!session.has_value()) {
      return absl::FailedPreconditionError("no session attached");
    }
    return std::make_pair(session->session_id, generation);
  }

  // The daemon heard from session `gen` just now (renewed its lease).
  void NoteRenewed(uint64_t gen) ABSL_LOCKS_EXCLUDED(mu) {
    absl::MutexLock lock(&mu);
    if (gen != generation || lease_lost) return;
    const absl::Time now = absl::Now();
    last_renewed = now;
    next_renewal = now + session->lease_ttl / 3;
  }

  // Call outcome `status` for session `gen`: NOT_FOUND means it is gone.
  void NoteOutcome(uint64_t gen, const absl::Status& status)
      ABSL_LOCKS_EXCLUDED(mu) {
    if (status.ok()) {
      NoteRenewed(gen);
    } else if (absl::IsNotFound(status)) {
      absl::MutexLock lock(&mu);
      if (gen == generation) lease_lost = true;
    }
  }

  // One renewal of session (`id`, `gen`); `context` may be cancelled by ~Impl.
  absl::Status Renew(const std::string& id, uint64_t gen,
                     grpc::ClientContext& context) {
    v1::KeepAliveRequest request;
    request.set_session_id(id);
    v1::KeepAliveResponse response;
    absl::Status status =
        FromGrpcStatus(stub->KeepAlive(&context, request, &response));
    NoteOutcome(gen, status);
    return status;
  }

  // The background renewal: sleeps until the next renewal is due (or the
  // session changes, or the client stops), renews, repeats.
  void KeepAliveLoop() ABSL_LOCKS_EXCLUDED(mu) {
    absl::MutexLock lock(&mu);
    while (!stopping) {
      if (!session.has_value() || lease_lost) {
        mu.Await(absl::Condition(
            +[](Impl* impl) ABSL_EXCLUSIVE_LOCKS_REQUIRED(impl->mu) {
              return impl->stopping ||
                     (impl->session.has_value() && !impl->lease_lost);
            },
            this));
        continue;
      }
      const uint64_t gen = generation;
      const absl::Time due = next_renewal;
      if (absl::Now() < due) {
        watched_generation = gen;
        mu.AwaitWithDeadline(
            absl::Condition(
                +[](Impl* impl) ABSL_EXCLUSIVE_LOCKS_REQUIRED(impl->mu) {
                  return impl->stopping ||
                         impl->generation != impl->watched_generation;
                },
                this),
            due);
        continue;
      }
      const std::string id = session->session_id;
      const absl::Duration ttl = session->lease_ttl;
      grpc::ClientContext context;
      context.set_deadline(
          DeadlineAfter(std::min(options.rpc_timeout, ttl / 3)));
      renewal_in_flight = &context;
      absl::Status status;
      {
        mu.Unlock();
        status = Renew(id, gen, context);
        mu.Lock();
      }
      renewal_in_flight = nullptr;
      if (gen != generation || lease_lost || status.ok()) continue;
      // Transient failure (daemon busy or restarting): retry soon, and give
      // up once the daemon must have expired the lease anyway.
      const absl::Time now = absl::Now();
      if (now - last_renewed >= ttl) {
        lease_lost = true;
      } else {
        next_renewal = now + std::max(ttl / 10, absl::Milliseconds(10));
      }
    }
  }

  absl::StatusOr<StepResults> StepStreamed(const StepBuilder& step)
      ABSL_LOCKS_EXCLUDED(stream_mu, mu) {
    absl::MutexLock stream_lock(&stream_mu);
    auto current = CurrentSession();
    if (!current.ok()) return current.status();
    auto& [id, gen] = *current;
    // The daemon binds a stream to the session of its first message.
    if (stream != nullptr && stream_session != id) CloseStream();
    if (stream == nullptr) {
      stream_context = std::make_unique<grpc::ClientContext>();
      stream = stub->StepStream(stream_context.get());
      stream_session = id;
    }
    StepMessages messages(step.rep_->packed, id);
    const v1::StepResponse& response = *messages.response;
    if (!stream->Write(*messages.request) || !stream->Read(messages.response)) {
      absl::Status status = FromGrpcStatus(stream->Finish());
      stream.reset();
      stream_context.reset();
      if (status.ok()) {
        status = absl::UnavailableError("StepStream closed by the daemon");
      }
      return status;
    }
    if (response.error_code() != 0) {
      absl::Status status =
          FromWireCode(response.error_code(), response.error_message());
      NoteOutcome(gen, status);
      return status;
    }
    NoteRenewed(gen);
    return FromProto(response, step.rep_->packed.kinds());
  }

  // Half-closes the stream and collects its status.
  void CloseStream() ABSL_EXCLUSIVE_LOCKS_REQUIRED(stream_mu) {
    stream->WritesDone();
    stream->Finish().IgnoreError();
    stream.reset();
    stream_context.reset();
  }

  const std::string address;
  const ClientOptions options;
  const std::shared_ptr<grpc::Channel> channel;
  const std::unique_ptr<v1::StateCache::Stub> stub;
  const std::unique_ptr<v1::StateCacheAdmin::Stub> admin;

  mutable absl::Mutex mu;
  std::optional<SessionInfo> session ABSL_GUARDED_BY(mu);
  // Bumped by every Attach and Detach, so late outcomes for an old session
  // are ignored.
  uint64_t generation ABSL_GUARDED_BY(mu) = 0;
  uint64_t watched_generation ABSL_GUARDED_BY(mu) = 0;
  bool attaching ABSL_GUARDED_BY(mu) = false;
  bool lease_lost ABSL_GUARDED_BY(mu) = false;
  absl::Time last_renewed ABSL_GUARDED_BY(mu);
  absl::Time next_renewal ABSL_GUARDED_BY(mu);
  bool stopping ABSL_GUARDED_BY(mu) = false;
  grpc::ClientContext* renewal_in_flight ABSL_GUARDED_BY(mu) = nullptr;
  // Started (under mu) by the first Attach; joined by ~Impl.
  std::thread keepalive_thread;

  // Held across a whole streamed round trip; taken before `mu`.
  absl::Mutex stream_mu ABSL_ACQUIRED_BEFORE(mu);
  std::unique_ptr<grpc::ClientContext> stream_context
      ABSL_GUARDED_BY(stream_mu);
  std::unique_ptr<StepStreamRpc> stream ABSL_GUARDED_BY(stream_mu);
  std::string stream_session ABSL_GUARDED_BY(stream_mu);

  // The session's step channel (AttachOptions::transport); one pass at a
  // time. Taken before `mu`.
  absl::Mutex channel_mu ABSL_ACQUIRED_BEFORE(mu);
  std::unique_ptr<StepChannelClient> step_channel ABSL_GUARDED_BY(channel_mu);
  uint64_t step_channel_generation ABSL_GUARDED_BY(channel_mu) = 0;
  // Reused by every Step on the channel (its columns keep their capacity).
  v1::StepResponse step_channel_response ABSL_GUARDED_BY(channel_mu);
};

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(std::string address,
                                                        ClientOptions options) {
  grpc::ChannelArguments args;
  const int max_message_bytes = static_cast<int>(
      std::clamp<int64_t>(options.max_message_bytes, 1024, INT32_MAX));
  args.SetMaxReceiveMessageSize(max_message_bytes);
  args.SetMaxSendMessageSize(max_message_bytes);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      Credentials(address, options.tls);
  if (!credentials.ok()) return credentials.status();
  if (options.tls.has_value() && !options.tls->server_name.empty()) {
    args.SetSslTargetNameOverride(options.tls->server_name);
  }
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(address, *std::move(credentials), args);
  if (!channel->WaitForConnected(DeadlineAfter(options.connect_timeout))) {
    if (!options.tls.has_value()) {
      return absl::UnavailableError(
          absl::StrCat("cannot connect to statecached at ", address, " within ",
                       absl::FormatDuration(options.connect_timeout)));
    }
    if (absl::Status reason = ConnectFailure(channel); !reason.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "cannot connect to statecached over TLS at ", address, " within ",
          absl::FormatDuration(options.connect_timeout), ": ",
          reason.message()));
    }
  }
  return std::unique_ptr<Client>(new Client(
      std::make_unique<Impl>(std::move(address), options, std::move(channel))));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

const std::string& Client::address() const { return impl_->address; }

absl::StatusOr<SessionInfo> Client::Attach(const ModelIdentity& identity,
                                           std::string_view client_name,
                                           const AttachOptions& options) {
  Impl& impl = *impl_;
  {
    absl::MutexLock lock(&impl.mu);
    if (impl.attaching) {
      return absl::FailedPreconditionError("another Attach is in progress");
    }
    if (impl.session.has_value() && !impl.lease_lost) {
      return absl::FailedPreconditionError(absl::StrCat(
          "session ", impl.session->session_id, " is attached; Detach first"));
    }
    impl.attaching = true;
  }
  v1::AttachRequest request;
  ToProto(identity, request.mutable_identity());
  request.set_client_name(std::string(client_name));
  request.set_advise_placement(options.advise_placement);
  v1::AttachResponse response;
  grpc::ClientContext context;
  impl.SetDeadline(context);
  absl::Status status =
      FromGrpcStatus(impl.stub->Attach(&context, request, &response));

  // The channel is opened before the session is published (no lock is held
  // across its call), and handed over under channel_mu after it.
  std::unique_ptr<StepChannelClient> channel;
  std::string transport_note;
  if (status.ok() && options.transport != AttachOptions::Transport::kGrpc) {
    absl::StatusOr<std::unique_ptr<StepChannelClient>> opened =
        IsUnixAddress(impl.address)
            ? StepChannelClient::Open(*impl.stub, response.session_id(),
                                      impl.options.rpc_timeout)
            : absl::FailedPreconditionError(
                  "a step channel needs the daemon's Unix socket; this client "
                  "is connected over TCP");
    if (opened.ok()) {
      channel = *std::move(opened);
    } else if (options.transport == AttachOptions::Transport::kChannel) {
      v1::DetachRequest detach;
      detach.set_session_id(response.session_id());
      v1::DetachResponse detached;
      grpc::ClientContext detach_context;
      impl.SetDeadline(detach_context);
      // The session is of no use without its channel; the error that
      // matters is the channel's.
      FromGrpcStatus(impl.stub->Detach(&detach_context, detach, &detached))
          .IgnoreError();
      status = absl::Status(
          opened.status().code(),
          absl::StrCat("no step channel: ", opened.status().message()));
    } else {
      transport_note = std::string(opened.status().message());
    }
  }

  absl::MutexLock channel_lock(&impl.channel_mu);
  absl::MutexLock lock(&impl.mu);
  impl.attaching = false;
  if (!status.ok()) return status;
  SessionInfo info{
      .session_id = response.session_id(),
      .epoch = response.epoch(),
      .lease_ttl = absl::Milliseconds(response.lease_ttl_ms()),
      .num_slots = response.num_slots(),
      .transfer = FromProto(response.transfer()),
      .max_operations_per_step = response.max_operations_per_step(),
      .max_hashes_per_step = response.max_hashes_per_step(),
      .handle = response.handle(),
      .placement_advised = response.placement_advised(),
      .eviction = response.eviction(),
      .transport = channel != nullptr ? "channel" : "grpc",
      .transport_note = std::move(transport_note),
      .state_memory = response.has_memory()
                          ? response.memory().SerializeAsString()
                          : std::string()};
  impl.session = info;
  ++impl.generation;
  impl.lease_lost = false;
  impl.last_renewed = absl::Now();
  impl.next_renewal = impl.last_renewed + info.lease_ttl / 3;
  if (impl.options.keepalive && !impl.keepalive_thread.joinable()) {
    impl.keepalive_thread = std::thread([&impl] { impl.KeepAliveLoop(); });
  }
  impl.step_channel = std::move(channel);
  impl.step_channel_generation = impl.generation;
  return info;
}

absl::StatusOr<int32_t> Client::Detach() {
  Impl& impl = *impl_;
  {
    absl::MutexLock lock(&impl.channel_mu);
    impl.step_channel.reset();  // kClose: the daemon lets it go at once
  }
  v1::DetachRequest request;
  {
    absl::MutexLock lock(&impl.mu);
    if (!impl.session.has_value()) {
      return absl::FailedPreconditionError("no session attached");
    }
    request.set_session_id(impl.session->session_id);
    impl.session.reset();
    impl.lease_lost = false;
    ++impl.generation;
  }
  v1::DetachResponse response;
  grpc::ClientContext context;
  impl.SetDeadline(context);
  absl::Status status =
      FromGrpcStatus(impl.stub->Detach(&context, request, &response));
  if (!status.ok()) return status;
  return response.requests_released();
}

absl::Status Client::KeepAlive() {
  auto current = impl_->CurrentSession();
  if (!current.ok()) return current.status();
  grpc::ClientContext context;
  impl_->SetDeadline(context);
  return impl_->Renew(current->first, current->second, context);
}

std::optional<SessionInfo> Client::session() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->session;
}

bool Client::lease_lost() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->session.has_value() && impl_->lease_lost;
}

absl::StatusOr<StepResults> Client::Step(const StepBuilder& step) {
  auto current = impl_->CurrentSession();
  if (!current.ok()) return current.status();
  const auto& [id, gen] = *current;
  {
    absl::MutexLock lock(&impl_->channel_mu);
    if (impl_->step_channel != nullptr &&
        impl_->step_channel_generation == gen) {
      v1::StepResponse& response = impl_->step_channel_response;
      absl::StatusOr<StepChannelClient::Sent> sent =
          impl_->step_channel->Step(step.rep_->packed, &response);
      if (!sent.ok()) {
        impl_->NoteOutcome(gen, sent.status());
        return sent.status();
      }
      if (*sent == StepChannelClient::Sent::kAnswered) {
        impl_->NoteOutcome(gen, absl::OkStatus());
        return FromProto(response, step.rep_->packed.kinds());
      }
      // Not sent (too big, or the channel closed before it ran): gRPC.
    }
  }
  StepMessages messages(step.rep_->packed, id);
  grpc::ClientContext context;
  impl_->SetDeadline(context);
  absl::Status status = FromGrpcStatus(
      impl_->stub->Step(&context, *messages.request, messages.response));
  impl_->NoteOutcome(gen, status);
  if (!status.ok()) return status;
  return FromProto(*messages.response, step.rep_->packed.kinds());
}

absl::StatusOr<StepResults> Client::StepStreamed(const StepBuilder& step) {
  return impl_->StepStreamed(step);
}

std::string Client::transport() const {
  absl::MutexLock lock(&impl_->channel_mu);
  return impl_->step_channel != nullptr && !impl_->step_channel->closed()
             ? "channel"
             : "grpc";
}

absl::Status Client::PingChannel() {
  absl::MutexLock lock(&impl_->channel_mu);
  if (impl_->step_channel == nullptr) {
    return absl::FailedPreconditionError("no step channel open");
  }
  return impl_->step_channel->Ping();
}

absl::Status Client::Ping() {
  grpc::ClientContext context;
  impl_->SetDeadline(context);
  v1::PingResponse response;
  return FromGrpcStatus(
      impl_->stub->Ping(&context, v1::PingRequest(), &response));
}

absl::StatusOr<DaemonStats> Client::GetStats() {
  grpc::ClientContext context;
  impl_->SetDeadline(context);
  v1::GetStatsResponse r;
  absl::Status status = FromGrpcStatus(
      impl_->admin->GetStats(&context, v1::GetStatsRequest(), &r));
  if (!status.ok()) return status;
  return FromProto(r);
}

absl::StatusOr<std::vector<SessionSummary>> Client::ListSessions() {
  std::vector<SessionSummary> sessions;
  v1::ListSessionsRequest request;
  request.set_page_size(1000);
  do {
    grpc::ClientContext context;
    impl_->SetDeadline(context);
    v1::ListSessionsResponse response;
    absl::Status status = FromGrpcStatus(
        impl_->admin->ListSessions(&context, request, &response));
    if (!status.ok()) return status;
    for (const v1::SessionInfo& s : response.sessions()) {
      sessions.push_back(SessionSummary{
          .handle = s.handle(),
          .principal = s.principal(),
          .client_name = s.client_name(),
          .requests = s.requests(),
          .slots = s.slots(),
          .pins = s.pins(),
          .attached = absl::Seconds(s.attached_seconds()),
          .idle = absl::Seconds(s.idle_seconds()),
          .lease_remaining = absl::Milliseconds(s.lease_remaining_ms())});
    }
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty());
  return sessions;
}

absl::StatusOr<ResizeResult> Client::Resize(int64_t target_slots,
                                            absl::Duration deadline) {
  v1::ResizeRequest request;
  request.set_target_slots(target_slots);
  request.set_deadline_ms(absl::ToInt64Milliseconds(deadline));
  grpc::ClientContext context;
  // The daemon answers by its own deadline; allow the usual slack on top.
  impl_->SetDeadline(context, deadline);
  v1::ResizeResponse response;
  absl::Status status =
      FromGrpcStatus(impl_->admin->Resize(&context, request, &response));
  if (!status.ok()) return status;
  return ResizeResult{.num_slots = response.num_slots(),
                      .relocated = response.relocated(),
                      .evicted = response.evicted()};
}

absl::StatusOr<int64_t> Client::ResizeHostTier(int64_t bytes) {
  v1::ResizeRequest request;
  request.set_host_tier_bytes(bytes);
  grpc::ClientContext context;
  impl_->SetDeadline(context);
  v1::ResizeResponse response;
  absl::Status status =
      FromGrpcStatus(impl_->admin->Resize(&context, request, &response));
  if (!status.ok()) return status;
  return response.host_tier_bytes();
}

absl::StatusOr<int32_t> Client::EvictSession(std::string_view handle) {
  v1::EvictSessionRequest request;
  request.set_handle(std::string(handle));
  grpc::ClientContext context;
  impl_->SetDeadline(context);
  v1::EvictSessionResponse response;
  absl::Status status =
      FromGrpcStatus(impl_->admin->EvictSession(&context, request, &response));
  if (!status.ok()) return status;
  return response.requests_released();
}

absl::StatusOr<DrainResult> Client::Drain(bool resume) {
  v1::DrainRequest request;
  request.set_resume(resume);
  grpc::ClientContext context;
  impl_->SetDeadline(context);
  v1::DrainResponse response;
  absl::Status status =
      FromGrpcStatus(impl_->admin->Drain(&context, request, &response));
  if (!status.ok()) return status;
  return DrainResult{.draining = response.draining(),
                     .requests = response.requests()};
}

}  // namespace statecache
