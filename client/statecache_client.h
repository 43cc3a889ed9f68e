// statecache::Client: the C++ client of statecached.
//
// A scheduler connects, attaches a session with its model's identity, and
// then runs one Step per scheduler pass: an ordered list of operations built
// with StepBuilder, answered with one result per operation. An operator tool
// uses the admin calls (GetStats, ListSessions, Resize, EvictSession, Drain).
//
//   auto client = statecache::Client::Connect(statecache::DefaultAddress());
//   if (!client.ok()) ...;
//   auto session = (*client)->Attach({.model_id = "m", .hash_block_size = 64},
//                                    "my-scheduler");
//   statecache::StepBuilder step;
//   step.BeginPass().Admit("req-1", /*width=*/1, /*num_tokens=*/300,
//                          /*anchor_pos=*/300, hashes, /*kv_hit_blocks=*/0);
//   auto results = (*client)->Step(step);
//   auto admit = results->Get<statecache::AdmitResult>(1);  // op 1: Admit
//
// A daemon serving TCP does so over TLS (its --tls_cert; mutual TLS with its
// --tls_client_ca) unless it runs with --insecure_tcp; ClientOptions::tls
// reaches it:
//
//   statecache::ClientOptions options;
//   options.tls = *statecache::TlsOptions::FromFiles("ca.pem", "me.pem",
//                                                    "me.key");
//   auto client = statecache::Client::Connect("10.0.0.5:50051", options);
//
// The protocol, every operation's arguments and every error code are
// documented in proto/statecache/v1/statecache.proto; this header mirrors it
// with plain C++ types (no gRPC or protobuf types appear here). GetStats'
// answer (DaemonStats and the ModelIdentity and TransferConfig it carries)
// is in client/daemon_stats.h, which the build writes from the proto: its
// fields are the proto's, named and ordered alike.
//
// Errors: every call returns the daemon's status as an absl::Status with the
// same code (UNAVAILABLE when the daemon cannot be reached, DEADLINE_EXCEEDED
// when it did not answer within ClientOptions::rpc_timeout). Session calls
// made while no session is attached return FAILED_PRECONDITION.
//
// Leases: after Attach a background thread renews the session's lease every
// lease_ttl / 3 (Steps renew it too). If the daemon says the session is gone
// (NOT_FOUND: it expired, was evicted, or the daemon restarted), or no
// renewal has succeeded for a whole lease_ttl, lease_lost() turns true and
// renewal stops: the session's requests have been released by the daemon,
// and the scheduler must Attach again and re-admit. The destructor stops the
// thread but does not detach (call Detach for a clean goodbye).
//
// Thread safety: Client is thread-safe. StepStreamed calls are serialized
// (one stream, one message in flight). StepBuilder and StepResults are plain
// values (thread-compatible).
#ifndef STATECACHE_CLIENT_STATECACHE_CLIENT_H_
#define STATECACHE_CLIENT_STATECACHE_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/daemon_stats.h"  // generated from the proto by the build
#include "vocabulary/default_address.h"

namespace statecache {

// TLS for a TCP address: what Connect needs to reach a daemon that serves
// TCP over TLS (its --tls_cert and --tls_key; mutual TLS with its
// --tls_client_ca). Certificates and keys are PEM text (FromFiles reads
// files). Connect checks them: see Client::Connect.
struct TlsOptions {
  // The CA certificate(s) the daemon's certificate must chain to. Empty:
  // gRPC's default roots (the system's).
  std::string root_certificates = {};
  // This client's certificate (chain) and its private key, both or neither:
  // a daemon with --tls_client_ca refuses a client without one. The
  // certificate's name (first subject alternative name, else common name)
  // is the client's principal, x509:NAME, which sessions are bound to and
  // --admin_allow names operators by. Empty: no client certificate (the
  // principal is "anonymous").
  std::string certificate_chain = {};
  std::string private_key = {};
  // The name the daemon's certificate must carry, when it is not the
  // address's host (e.g. "statecached.internal" for 10.0.0.5:50051).
  // Empty: the host.
  std::string server_name = {};

  // The PEM files given (an empty path leaves that part empty): `ca_file`
  // into root_certificates, `cert_file` and `key_file` into
  // certificate_chain and private_key (statecachectl's --tls_ca,
  // --tls_cert, --tls_key). Errors: INVALID_ARGUMENT naming the file when
  // one cannot be read or holds no PEM certificate (ca_file, cert_file) or
  // PEM private key (key_file), or when only one of cert_file and key_file
  // is given.
  static absl::StatusOr<TlsOptions> FromFiles(std::string_view ca_file,
                                              std::string_view cert_file,
                                              std::string_view key_file,
                                              std::string server_name = "");
};

struct ClientOptions {
  // Deadline of each call (Resize gets its own deadline on top of this).
  absl::Duration rpc_timeout = absl::Seconds(5);
  // How long Connect waits for the daemon to accept a connection.
  absl::Duration connect_timeout = absl::Seconds(5);
  // Renew the lease in the background after Attach.
  bool keepalive = true;
  // Largest message sent or received; match the daemon's --max_message_bytes.
  int64_t max_message_bytes = int64_t{16} << 20;
  // Set: the channel uses TLS (a TCP address only), which a daemon serving
  // TCP needs unless it runs with --insecure_tcp. Unset: plaintext, as a
  // Unix socket (always) and an --insecure_tcp daemon want.
  std::optional<TlsOptions> tls = std::nullopt;
};

// The model's identity; every field must equal the daemon's configuration.
// (Every member has an initializer so designated initializers may omit any
// without -Wmissing-field-initializers.)
// How to attach.
struct AttachOptions {
  // Ask for placement advice: each AdmitResult then says where the
  // request's checkpoints go (branch_blocks, continuation_blocks), and a
  // scheduler that checkpoints exactly there needs no placement rule of
  // its own (client/README.md, "Placement advice"; the contract is
  // AttachRequest.advise_placement in statecache.proto).
  // SessionInfo::placement_advised says whether the daemon gives it.
  bool advise_placement = false;
  // How Client::Step reaches the daemon:
  //   kAuto:    a step channel (Steps through shared memory, no gRPC on
  //             the way; proto/step_channel.h) when the client is on the
  //             daemon's Unix socket and the daemon grants one, else gRPC;
  //   kGrpc:    always the Step RPC;
  //   kChannel: a step channel, or Attach fails (and detaches).
  // SessionInfo::transport says which one is in use, and why not the
  // channel. A pass too big for the channel's request area, and every pass
  // after the daemon closed the channel, goes over gRPC.
  enum class Transport { kAuto, kGrpc, kChannel };
  Transport transport = Transport::kAuto;
};

// What Attach returns.
struct SessionInfo {
  std::string session_id;
  // Changes on every daemon start.
  uint64_t epoch = 0;
  absl::Duration lease_ttl;
  int64_t num_slots = 0;
  TransferConfig transfer;
  int32_t max_operations_per_step = 0;
  // Hashes one Step may carry over all its operations.
  int64_t max_hashes_per_step = 0;
  // What operators and the daemon's log call the session; not a credential.
  std::string handle;
  // Whether admit results carry placement advice (AttachOptions).
  bool placement_advised = false;
  // Which checkpoint a shortage spends: "lru" or "second-chance".
  std::string eviction;
  // "channel" or "grpc": how Step reaches the daemon (AttachOptions).
  std::string transport;
  // Why not the channel, when transport is "grpc" under kAuto.
  std::string transport_note;
  // The state memory, as a serialized statecache.v1.StateMemory; empty when
  // the daemon keeps none. RegionFromStateMemory (client/state_memory.h)
  // turns it into the typed view (layout, every placement) that
  // HostRegion::Open maps.
  std::string state_memory;
};

// ----------------------------------------------------------- step results
// One struct per Step operation, field for field as in the proto.

struct SlotMove {
  std::string request_id;
  int32_t index = 0;  // into the request's slots; 0 = committed
  int64_t from_slot = -1;
  int64_t to_slot = -1;
};
struct BeginPassResult {
  std::vector<SlotMove> moves;
  int32_t pins_released = 0;
};
struct AdmitResult {
  std::vector<int64_t> slots;  // [0] committed, [1..] rollback
  int64_t fork_src = -1;
  int32_t blocks_resumed = 0;
  bool adopted = false;
  bool from_tier = false;
  // Placement advice (an advised session; else 0): checkpoint at this
  // block boundary (a branch point); at this one and every boundary the
  // decode reaches after it (the continuation, each replacing the last);
  // and, when set, at every ladder_blocks-th boundary of the prefill
  // (guesses, while the pool has room).
  int32_t branch_blocks = 0;
  int32_t continuation_blocks = 0;
  int32_t ladder_blocks = 0;
};
struct ResumableHitResult {
  int32_t blocks = 0;
  int32_t tier_blocks = 0;
};
struct LookupResult {
  int64_t slot = -1;
  bool in_tier = false;
};
// A position a forward will pass, to be snapshotted (Reserve's argument).
struct MidstepPosition {
  int64_t position = 0;
  int64_t hash = 0;
};
struct MidstepReservation {
  int64_t slot = -1;
  int64_t position = 0;
  int64_t hash = 0;
};
struct ReserveResult {
  std::vector<MidstepReservation> reservations;
};
struct PublishResult {
  int32_t published = 0;
};
struct CancelResult {
  int32_t cancelled = 0;
};
// The result of the `checkpoint` operation (a fork checkpoint).
struct ForkCheckpointResult {
  int64_t state_slot = -1;
  int64_t fork_src = -1;
  bool kept = false;
};
struct ConsumeForkResult {
  int64_t fork_src = -1;
};
struct AdoptForkSourceResult {
  int64_t state_slot = -1;
};
struct ReleaseResult {
  int32_t slots_released = 0;
};
struct UnindexResult {
  int32_t orphaned = 0;
};
struct ClearIndexResult {};
// "Op": statecache::CopyResult is the device layer's report of a copy.
struct CopyOpResult {
  uint64_t bytes = 0;
};
struct SnapshotResult {
  int64_t slot = -1;  // -1 when dropped
  bool kept = false;
};

using OperationResult =
    std::variant<BeginPassResult, AdmitResult, ResumableHitResult, LookupResult,
                 ReserveResult, PublishResult, CancelResult,
                 ForkCheckpointResult, ConsumeForkResult, AdoptForkSourceResult,
                 ReleaseResult, UnindexResult, ClearIndexResult, CopyOpResult,
                 SnapshotResult>;

// The outcome of one Step: one entry per operation, in the order they were
// added to the StepBuilder. A refused operation's entry is its status (it had
// no effect); later operations still ran.
struct StepResults {
  uint64_t epoch = 0;
  std::vector<absl::StatusOr<OperationResult>> results;

  // The result of operation `index` as a T: the operation's own status if it
  // was refused; OUT_OF_RANGE for a bad index; INVALID_ARGUMENT if operation
  // `index` is not the kind whose result is T.
  template <typename T>
  absl::StatusOr<T> Get(size_t index) const {
    if (index >= results.size()) {
      return absl::OutOfRangeError(
          absl::StrCat("operation ", index, " of a step of ", results.size()));
    }
    const absl::StatusOr<OperationResult>& result = results[index];
    if (!result.ok()) return result.status();
    if (const T* typed = std::get_if<T>(&*result)) return *typed;
    return absl::InvalidArgumentError(
        absl::StrCat("operation ", index, " has another result type"));
  }
};

// ----------------------------------------------------------- StepBuilder

// The ordered operations of one Step. Each method appends one operation and
// returns *this; the operation's result is at index size() - 1 in
// StepResults. Arguments are described in statecache.proto.
//
// Thread-compatible. Reusable: Clear() keeps the allocations. A moved-from
// StepBuilder may only be destroyed or assigned to.
class StepBuilder {
 public:
  StepBuilder();
  ~StepBuilder();
  StepBuilder(StepBuilder&&) noexcept;
  StepBuilder& operator=(StepBuilder&&) noexcept;
  StepBuilder(const StepBuilder&) = delete;
  StepBuilder& operator=(const StepBuilder&) = delete;

  StepBuilder& BeginPass();
  StepBuilder& Admit(std::string_view request_id, int32_t width,
                     int64_t num_tokens, int64_t anchor_pos,
                     absl::Span<const int64_t> block_hashes,
                     int32_t kv_hit_blocks);
  StepBuilder& ResumableHit(int64_t num_tokens,
                            absl::Span<const int64_t> block_hashes,
                            int32_t kv_hit_blocks,
                            bool assume_checkpointed = false);
  StepBuilder& Lookup(int64_t hash);
  StepBuilder& Reserve(std::string_view request_id,
                       absl::Span<const MidstepPosition> positions);
  StepBuilder& Publish(std::string_view request_id, bool keep_all = false);
  StepBuilder& Cancel(std::string_view request_id);
  StepBuilder& Checkpoint(std::string_view request_id, int64_t boundary_blocks,
                          int64_t hash, int64_t anchor_pos = 0);
  StepBuilder& ConsumeFork(std::string_view request_id);
  StepBuilder& AdoptForkSource(std::string_view request_id);
  StepBuilder& Release(std::string_view request_id);
  StepBuilder& Unindex(absl::Span<const int64_t> hashes);
  StepBuilder& ClearIndex();
  // The daemon's copy engine (needs state memory).
  StepBuilder& Copy(std::string_view request_id, int32_t from_index,
                    int32_t to_index);
  StepBuilder& Snapshot(std::string_view request_id, int64_t position,
                        int64_t hash);

  // Operations added so far.
  size_t size() const;
  bool empty() const { return size() == 0; }
  void Clear();

 private:
  friend class Client;
  struct Rep;
  std::unique_ptr<Rep> rep_;
};

// ----------------------------------------------------------- admin results

// One attached session, as ListSessions reports it.
struct SessionSummary {
  // What operators name a session by (never its secret id).
  std::string handle;
  // Who attached it: "uid:N", "x509:NAME", "anonymous".
  std::string principal;
  std::string client_name;
  int64_t requests = 0;
  int64_t slots = 0;
  int64_t pins = 0;
  absl::Duration attached;
  absl::Duration idle;
  absl::Duration lease_remaining;
};

struct ResizeResult {
  int64_t num_slots = 0;
  int64_t relocated = 0;
  int64_t evicted = 0;
};

// What Drain returns.
struct DrainResult {
  bool draining = false;
  // Requests still admitted when the call returned.
  int64_t requests = 0;
};

// ----------------------------------------------------------- Client

class Client {
 public:
  // Opens a channel to `address` (gRPC syntax: "unix:/path" or "host:port")
  // and waits up to options.connect_timeout for the daemon to accept it;
  // over TLS when options.tls is set.
  // Errors: UNAVAILABLE when it does not (the message names the address;
  // with TLS also why gRPC's last attempt failed, e.g. "Ssl handshake
  // failed: ... certificate verify failed" for a daemon certificate that
  // does not chain to root_certificates, or "Socket closed" for a client
  // certificate the daemon refused); INVALID_ARGUMENT (nothing sent) for
  // options.tls with a Unix socket address (the daemon serves Unix sockets
  // in plaintext: the kernel names their peers), or a TlsOptions with only
  // one of certificate_chain and private_key, a root_certificates or
  // certificate_chain without a PEM certificate, or a private_key without a
  // PEM private key. (A key that does not match its certificate is not
  // caught here: gRPC then never connects, UNAVAILABLE.)
  static absl::StatusOr<std::unique_ptr<Client>> Connect(
      std::string address, ClientOptions options = {});
  // Stops the keepalive thread and closes the step stream. Does not detach.
  ~Client();

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::string& address() const;

  // ----------------------------------------------------------- session

  // Opens a session and starts renewing its lease.
  // REQUIRES: no session attached, or its lease lost.
  // Errors: FAILED_PRECONDITION (a session is attached; or the daemon's
  // identity differs, the message names the field), INVALID_ARGUMENT
  // (client_name over 256 bytes), UNAVAILABLE (daemon draining).
  absl::StatusOr<SessionInfo> Attach(const ModelIdentity& identity,
                                     std::string_view client_name,
                                     const AttachOptions& options = {});
  // Closes the session (releasing its requests) and stops renewing.
  // Returns the number of requests released. The session is forgotten even
  // when the call fails. Errors: NOT_FOUND (already expired).
  absl::StatusOr<int32_t> Detach();
  // Renews the lease now (the background thread does this on its own).
  absl::Status KeepAlive();
  // The attached session, if any (also after its lease was lost).
  std::optional<SessionInfo> session() const;
  // True once the daemon dropped the session or renewal failed for a whole
  // lease; Attach again.
  bool lease_lost() const;

  // Runs one step: through the session's step channel when it has one
  // (AttachOptions::transport), else as a unary call. REQUIRES: attached.
  // Errors (whole step refused): NOT_FOUND (session gone: lease_lost() turns
  // true), INVALID_ARGUMENT (too many operations, empty step); UNAVAILABLE
  // (the daemon went away, the pass may or may not have run).
  absl::StatusOr<StepResults> Step(const StepBuilder& step);
  // The same over one long-lived StepStream (opened on first use, reopened
  // after a failure or a new session): the lowest-latency gRPC path.
  absl::StatusOr<StepResults> StepStreamed(const StepBuilder& step);
  // "channel" while Step goes through a step channel, else "grpc" (the
  // channel was never opened, or the daemon closed it).
  std::string transport() const;

  // Round trip that does nothing.
  absl::Status Ping();
  // The step channel's bare round trip (an empty request and reply through
  // shared memory). Errors: FAILED_PRECONDITION without an open channel.
  absl::Status PingChannel();

  // ----------------------------------------------------------- operator

  absl::StatusOr<DaemonStats> GetStats();
  // Every attached session, in attach order (the daemon's pages, read one
  // after another). Errors: PERMISSION_DENIED (not an operator).
  absl::StatusOr<std::vector<SessionSummary>> ListSessions();
  // Grows or shrinks the pool; blocks until done or `deadline` passes.
  // Errors: INVALID_ARGUMENT, ABORTED (another resize running),
  // DEADLINE_EXCEEDED (the message says how far it got).
  absl::StatusOr<ResizeResult> Resize(
      int64_t target_slots, absl::Duration deadline = absl::Seconds(10));
  // Sets the host tier's room to `bytes` (0: off), at once, keeping the most
  // recent images that fit; returns the room it got (whole slot images).
  // Errors: INVALID_ARGUMENT (negative, or room for no slot),
  // FAILED_PRECONDITION (no state memory), PERMISSION_DENIED.
  absl::StatusOr<int64_t> ResizeHostTier(int64_t bytes);
  // Ends the session with this handle (from ListSessions) as if its lease
  // had lapsed; returns requests released.
  // Errors: NOT_FOUND, PERMISSION_DENIED.
  absl::StatusOr<int32_t> EvictSession(std::string_view handle);
  // Stops admitting (resume = false: Attach and admit are refused with
  // UNAVAILABLE, admitted requests run on) or admits again (resume = true).
  // Poll GetStats until `requests` is 0 to know the daemon is idle.
  // Always OK unless the call itself fails.
  absl::StatusOr<DrainResult> Drain(bool resume = false);

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace statecache

#endif  // STATECACHE_CLIENT_STATECACHE_CLIENT_H_
