#include "daemon/serving.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/common/status_macros.h"
#include "daemon/listen_address.h"
#include "daemon/service/log.h"
#include "proto/statecache/v1/statecache.grpc.pb.h"

namespace statecache {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path,
                                    absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": cannot be read"));
  }
  if (text.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, "=", path, ": not a PEM file (or cannot be read)"));
  }
  return text.str();
}

// OpenSSL's objects, freed on scope exit.
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

std::unique_ptr<BIO, BioFree> Bio(const std::string& pem) {
  return std::unique_ptr<BIO, BioFree>(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The first certificate in `pem`, or null.
std::unique_ptr<X509, X509Free> FirstCertificate(const std::string& pem) {
  auto bio = Bio(pem);
  return std::unique_ptr<X509, X509Free>(
      bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
}

// What gRPC would otherwise find only at every handshake, after the daemon
// said it was listening: the certificate parses, the key parses and is the
// certificate's, the client CA holds a certificate. Each refusal names the
// flag and its file.
absl::Status CheckTlsMaterial(const ServingOptions& options,
                              const std::string& cert, const std::string& key,
                              const std::string& client_ca) {
  auto bad = [](const char* flag, const std::string& path,
                absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": ", what));
  };
  std::unique_ptr<X509, X509Free> certificate = FirstCertificate(cert);
  if (certificate == nullptr) {
    return bad("tls_cert", options.tls_cert,
               "holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
  }
  auto key_bio = Bio(key);
  // No passphrase: OpenSSL's default callback would prompt on a terminal.
  pem_password_cb* no_passphrase = [](char*, int, int, void*) { return 0; };
  std::unique_ptr<EVP_PKEY, KeyFree> private_key(
      key_bio ? PEM_read_bio_PrivateKey(key_bio.get(), nullptr, no_passphrase,
                                        nullptr)
              : nullptr);
  if (private_key == nullptr) {
    return bad("tls_key", options.tls_key,
               "holds no unencrypted PEM private key");
  }
  if (X509_check_private_key(certificate.get(), private_key.get()) != 1) {
    return bad("tls_key", options.tls_key,
               absl::StrCat("is not the key of --tls_cert=", options.tls_cert));
  }
  if (!options.tls_client_ca.empty() &&
      FirstCertificate(client_ca) == nullptr) {
    return bad("tls_client_ca", options.tls_client_ca,
               "holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
  }
  return absl::OkStatus();
}

// The server's TLS credentials, or null for plaintext. Checks the flags
// against the address first.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TlsCredentials(
    const ServingOptions& options) {
  const bool tcp = IsTcpAddress(options.listen);
  const bool tls = !options.tls_cert.empty() || !options.tls_key.empty();
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together: give both or neither");
  }
  if (!options.tls_client_ca.empty() && !tls) {
    return absl::InvalidArgumentError(
        "--tls_client_ca needs --tls_cert and --tls_key");
  }
  if (tls && !tcp) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TLS flags given, but ", options.listen,
        " is a Unix socket: TLS is for TCP (a Unix socket's peers are "
        "identified by the kernel)"));
  }
  if (tls && options.insecure_tcp) {
    return absl::InvalidArgumentError(
        "--insecure_tcp and TLS flags contradict each other: choose one");
  }
  if (tcp && !tls && !options.insecure_tcp) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TCP address ", options.listen,
        " without TLS: give --tls_cert and --tls_key (and --tls_client_ca "
        "to require client certificates), or --insecure_tcp to serve "
        "plaintext knowingly"));
  }
  if (!tls) return std::shared_ptr<grpc::ServerCredentials>();
  grpc::SslServerCredentialsOptions ssl(
      options.tls_client_ca.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.private_key, ReadPem(options.tls_key, "tls_key"));
  ASSIGN_OR_RETURN(pair.cert_chain, ReadPem(options.tls_cert, "tls_cert"));
  if (!options.tls_client_ca.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_root_certs,
                     ReadPem(options.tls_client_ca, "tls_client_ca"));
  }
  RETURN_IF_ERROR(CheckTlsMaterial(options, pair.cert_chain, pair.private_key,
                                   ssl.pem_root_certs));
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  return grpc::SslServerCredentials(ssl);
}

absl::Status CheckConnectionLimits(const ServingOptions& options) {
  if (options.handshake_timeout_ms < 10 ||
      options.handshake_timeout_ms > 600'000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--handshake_timeout_ms=", options.handshake_timeout_ms,
                     ": want 10 to 600000 (ten minutes)"));
  }
  if (options.max_resets_per_second < 0 ||
      options.max_resets_per_second > 1'000'000'000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_resets_per_second=", options.max_resets_per_second,
                     ": want 0 (no limit) to 1000000000"));
  }
  return absl::OkStatus();
}

}  // namespace

bool IsTcpAddress(const std::string& address) {
  return !UnixSocketPath(address).has_value() &&
         !absl::StartsWith(address, "unix-abstract:");
}

absl::StatusOr<std::unique_ptr<Serving>> Serving::Start(
    const ServingOptions& options,
    std::initializer_list<grpc::Service*> services, PeerTable* peers) {
  RETURN_IF_ERROR(CheckConnectionLimits(options));
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> tls,
                   TlsCredentials(options));
  if (IsTcpAddress(options.listen) && tls == nullptr) {
    LOG_WARNING(
        "serving plaintext TCP on %s (--insecure_tcp): NO encryption and NO "
        "authentication. Anyone who can reach it can attach, use any session "
        "whose id they see on the wire, and read the traffic; its peers are "
        "anonymous, so the operator calls are refused over it.",
        options.listen);
  }
  std::unique_ptr<Serving> serving(new Serving());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // No listening port of gRPC's own: the gate accepts and hands over.
  if (tls != nullptr) {
    serving->tls_ = builder.experimental().AddExternalConnectionAcceptor(
        grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
        tls);
  }
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             options.max_streams_per_connection);
  // The gate waits only for a TLS connection's first byte; gRPC bounds the
  // rest of the handshake.
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(options.handshake_timeout_ms));
  // Per-connection stream counters for StreamResetWatch (gRPC's default,
  // said out loud: the rapid-reset defence reads them).
  builder.AddChannelArgument(GRPC_ARG_ENABLE_CHANNELZ, 1);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  for (grpc::Service* service : services) builder.RegisterService(service);
  serving->server_ = builder.BuildAndStart();
  if (serving->server_ == nullptr) {
    return absl::UnavailableError("gRPC could not start its server");
  }
  absl::StatusOr<ListeningSocket> socket = Listen(options.listen);
  if (!socket.ok()) {
    serving->server_->Shutdown(absl::ToChronoTime(absl::Now()));
    return socket.status();
  }
  if (!socket->path.empty() && ::chmod(socket->path.c_str(), 0660) != 0) {
    LOG_WARNING("chmod 0660 %s: %s", socket->path, std::strerror(errno));
  }
  serving->address_ = EffectiveAddress(options.listen, socket->port);
  std::vector<ListeningSocket> listeners;
  listeners.push_back(*std::move(socket));
  serving->gate_ = std::make_unique<ConnectionGate>(
      serving->server_.get(), peers, serving->tls_.get(), std::move(listeners),
      ConnectionGate::Options{
          .max_connections = options.max_connections,
          .handshake_timeout = absl::Milliseconds(options.handshake_timeout_ms),
          .max_resets_per_second = options.max_resets_per_second,
          .max_open_streams = options.max_streams_per_connection});
  RETURN_IF_ERROR(serving->gate_->Start());
  return serving;
}

Serving::~Serving() { Stop(absl::Now()); }

void Serving::SetHealth(bool serving) {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus(v1::StateCache::service_full_name(), serving);
  health->SetServingStatus(v1::StateCacheAdmin::service_full_name(), serving);
  health->SetServingStatus(serving);
}

// gRPC's own Shutdown would also wait the whole grace for every idle
// connection to go away (see call_tracker.h), so it gets only the grace
// that is left, at most kUnaryTail: ample for unary calls, which answer in
// microseconds.
void Serving::Drain(CallTracker& calls, absl::Duration grace) {
  constexpr absl::Duration kUnaryTail = absl::Milliseconds(200);
  const absl::Time grace_end = absl::Now() + grace;
  if (const int64_t busy = calls.in_flight(); busy > 0) {
    LOG_INFO("waiting for %d call(s) in progress", busy);
    if (const int64_t left = calls.WaitIdle(grace_end); left > 0) {
      LOG_WARNING("grace period over: cancelling %d call(s) in progress", left);
    }
  }
  Stop(std::min(grace_end, absl::Now() + kUnaryTail));
}

void Serving::Stop(absl::Time deadline) {
  if (stopped_) return;
  stopped_ = true;
  if (gate_ != nullptr) gate_->Stop();
  if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(deadline));
}

}  // namespace statecache
