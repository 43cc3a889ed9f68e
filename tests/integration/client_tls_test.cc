// statecache::Client over TLS (ClientOptions::tls) against the daemon's real
// TLS listener on 127.0.0.1, mutual with --tls_client_ca. The certificates
// are made here with openssl (P-256, valid a day) in a temporary directory
// removed at the end: a test CA and a second one, a server certificate for
// IP 127.0.0.1 and DNS localhost, client certificates "ops" and "eng" from
// the test CA.
//
// Checked: a client with its certificate attaches, steps (unary and
// streamed) and is named x509:eng in ListSessions; --admin_allow=x509:ops
// makes ops, not eng, an operator; a daemon certificate from another CA,
// a missing client certificate, a server name the certificate lacks and a
// plaintext client are refused with UNAVAILABLE naming the address (and,
// over TLS, why); bad TlsOptions are refused with INVALID_ARGUMENT before
// anything is sent.
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/statecache_client.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/test_util.h"

namespace statecache::testing {
namespace {

// Where a refused connection gives up.
constexpr absl::Duration kRefusedWithin = absl::Seconds(1);

// openssl's path on $PATH ("" if none).
std::string FindOpenssl() {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    if (dir.empty()) continue;
    std::string candidate = absl::StrCat(dir, "/openssl");
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// The certificates, in a temporary directory.
class Pki {
 public:
  static absl::StatusOr<std::unique_ptr<Pki>> Create() {
    const std::string openssl = FindOpenssl();
    if (openssl.empty()) return absl::NotFoundError("no openssl on PATH");
    absl::StatusOr<TempDir> dir = TempDir::Create();
    if (!dir.ok()) return dir.status();
    std::unique_ptr<Pki> pki(new Pki(*std::move(dir), openssl));
    for (absl::Status status :
         {pki->MakeCa("ca", "statecache-test-ca"),
          pki->MakeCa("other-ca", "statecache-other-test-ca"),
          pki->Issue("server", "/CN=statecached",
                     "subjectAltName=IP:127.0.0.1,DNS:localhost"),
          pki->Issue("ops", "/CN=ops"), pki->Issue("eng", "/CN=eng")}) {
      if (!status.ok()) return status;
    }
    return pki;
  }

  std::string Path(absl::string_view name) const {
    return absl::StrCat(dir_.path(), "/", name);
  }

  // Trust `ca`; present `who`'s certificate unless empty.
  TlsOptions Tls(absl::string_view who, absl::string_view ca = "ca",
                 std::string server_name = "") const {
    absl::StatusOr<TlsOptions> tls = TlsOptions::FromFiles(
        Path(absl::StrCat(ca, ".pem")),
        who.empty() ? "" : Path(absl::StrCat(who, ".pem")),
        who.empty() ? "" : Path(absl::StrCat(who, ".key")),
        std::move(server_name));
    EXPECT_TRUE(tls.ok()) << tls.status();
    return tls.ok() ? *tls : TlsOptions{};
  }

 private:
  Pki(TempDir dir, std::string openssl)
      : dir_(std::move(dir)), openssl_(std::move(openssl)) {}

  absl::Status Openssl(std::vector<std::string> args) const {
    args.insert(args.begin(), openssl_);
    absl::StatusOr<CommandResult> result = RunCommand(args);
    if (!result.ok()) return result.status();
    if (!result->exit.exited || result->exit.code != 0) {
      return absl::InternalError(absl::StrCat("openssl ", args[1], ": ",
                                              result->exit.ToString(), "\n",
                                              result->err));
    }
    return absl::OkStatus();
  }

  absl::Status MakeCa(const std::string& name, const std::string& cn) const {
    return Openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
                    Path(name + ".key"), "-out", Path(name + ".pem"), "-subj",
                    "/CN=" + cn, "-days", "1"});
  }

  // A key and a certificate for `subject` signed by the test CA, with the
  // X.509 v3 `extensions` (a -extfile line).
  absl::Status Issue(
      const std::string& name, const std::string& subject,
      const std::string& extensions = "basicConstraints=CA:FALSE") const {
    const std::string key = Path(name + ".key");
    const std::string csr = Path(name + ".csr");
    const std::string ext = Path(name + ".ext");
    if (absl::Status s = Openssl(
            {"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", key, "-out", csr, "-subj", subject});
        !s.ok()) {
      return s;
    }
    std::ofstream(ext) << extensions << "\n";
    return Openssl({"x509", "-req", "-in", csr, "-CA", Path("ca.pem"), "-CAkey",
                    Path("ca.key"), "-CAcreateserial", "-days", "1", "-extfile",
                    ext, "-out", Path(name + ".pem")});
  }

  TempDir dir_;
  std::string openssl_;
};

class ClientTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<Pki>> pki = Pki::Create();
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = pki->release();
  }
  static void TearDownTestSuite() {
    delete pki_;
    pki_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(pki_, nullptr);
    // The later --listen overrides DaemonProcess's Unix socket.
    auto daemon = DaemonProcess::Start(WithIdentity(
        {"--num_slots=16", "--listen=127.0.0.1:0",
         "--tls_cert=" + pki_->Path("server.pem"),
         "--tls_key=" + pki_->Path("server.key"),
         "--tls_client_ca=" + pki_->Path("ca.pem"), "--admin_allow=x509:ops"}));
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    // "listening on 127.0.0.1:PORT epoch=N", written before "ready".
    const std::string log = daemon_->log();
    const size_t at = log.find("listening on 127.0.0.1:");
    ASSERT_NE(at, std::string::npos) << log;
    const size_t from = at + std::string("listening on ").size();
    address_ = log.substr(from, log.find(' ', from) - from);
  }

  void TearDown() override {
    if (daemon_) {
      EXPECT_TRUE(daemon_->StopCleanly().ok()) << daemon_->log();
    }
  }

  absl::StatusOr<std::unique_ptr<Client>> Connect(
      std::optional<TlsOptions> tls,
      absl::Duration timeout = absl::Seconds(10)) {
    ClientOptions options;
    options.connect_timeout = timeout;
    options.tls = std::move(tls);
    return Client::Connect(address_, options);
  }

  // Connect's refusal: UNAVAILABLE naming the address.
  std::string Refused(std::optional<TlsOptions> tls) {
    absl::StatusOr<std::unique_ptr<Client>> client =
        Connect(std::move(tls), kRefusedWithin);
    EXPECT_TRUE(absl::IsUnavailable(client.status())) << client.status();
    const std::string message(client.status().message());
    EXPECT_TRUE(absl::StrContains(message, address_)) << message;
    return message;
  }

  static Pki* pki_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::string address_;
};

Pki* ClientTlsTest::pki_ = nullptr;

TEST_F(ClientTlsTest, MutualTlsAttachesStepsAndNamesTheCertificate) {
  auto eng = Connect(pki_->Tls("eng"));
  ASSERT_TRUE(eng.ok()) << eng.status() << "\n" << daemon_->log();
  auto ops = Connect(pki_->Tls("ops"));
  ASSERT_TRUE(ops.ok()) << ops.status();
  EXPECT_EQ((*eng)->address(), address_);

  auto session = (*eng)->Attach(TestIdentity(), "eng-scheduler");
  ASSERT_TRUE(session.ok()) << session.status();
  const std::vector<int64_t> hashes = ChainedHashes({1, 2});
  StepBuilder step;
  step.BeginPass().Admit("r1", kWidth, 2 * kBlock, 2 * kBlock, hashes, 0);
  auto results = (*eng)->Step(step);
  ASSERT_TRUE(results.ok()) << results.status();
  auto admit = results->Get<AdmitResult>(1);
  ASSERT_TRUE(admit.ok()) << admit.status();
  EXPECT_EQ(admit->slots.size(), static_cast<size_t>(kWidth));
  StepBuilder release;
  release.Release("r1");
  auto released = (*eng)->StepStreamed(release);
  ASSERT_TRUE(released.ok()) << released.status();
  auto released_result = released->Get<ReleaseResult>(0);
  ASSERT_TRUE(released_result.ok()) << released_result.status();
  EXPECT_EQ(released_result->slots_released, kWidth);

  auto sessions = (*ops)->ListSessions();
  ASSERT_TRUE(sessions.ok()) << sessions.status();
  ASSERT_EQ(sessions->size(), 1u);
  EXPECT_EQ((*sessions)[0].principal, "x509:eng");
  EXPECT_EQ((*sessions)[0].client_name, "eng-scheduler");
  // eng is no operator.
  auto refused = (*eng)->ListSessions();
  EXPECT_TRUE(absl::IsPermissionDenied(refused.status())) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "x509:eng"))
      << refused.status();
  EXPECT_TRUE((*eng)->Detach().ok());
}

TEST_F(ClientTlsTest, ADaemonCertificateFromAnotherCaIsRefused) {
  const std::string message = Refused(pki_->Tls("eng", "other-ca"));
  EXPECT_TRUE(absl::StrContains(message, "over TLS")) << message;
  EXPECT_TRUE(absl::StrContains(absl::AsciiStrToLower(message),
                                "certificate verify failed"))
      << message;
}

TEST_F(ClientTlsTest, MutualTlsRefusesAClientWithoutACertificate) {
  Refused(pki_->Tls(""));
  // Nor does a plaintext client get in.
  Refused(std::nullopt);
}

TEST_F(ClientTlsTest, ServerNameOverride) {
  auto client = Connect(pki_->Tls("eng", "ca", "localhost"));
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->Ping().ok());
  const std::string message =
      Refused(pki_->Tls("eng", "ca", "elsewhere.invalid"));
  EXPECT_TRUE(absl::StrContains(message, "elsewhere.invalid")) << message;
}

TEST_F(ClientTlsTest, BadOptionsAreRefusedBeforeConnecting) {
  ClientOptions options;
  options.tls = pki_->Tls("eng");
  auto unix_socket = Client::Connect("unix:/nonexistent/s.sock", options);
  EXPECT_TRUE(absl::IsInvalidArgument(unix_socket.status()))
      << unix_socket.status();
  EXPECT_TRUE(absl::StrContains(unix_socket.status().message(), "Unix socket"))
      << unix_socket.status();

  TlsOptions key_as_certificate = pki_->Tls("eng");
  key_as_certificate.certificate_chain = key_as_certificate.private_key;
  auto bad = Connect(key_as_certificate);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(),
                                "certificate_chain: not a PEM certificate"))
      << bad.status();
  TlsOptions no_key = pki_->Tls("eng");
  no_key.private_key.clear();
  bad = Connect(no_key);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();

  auto missing = TlsOptions::FromFiles(pki_->Path("missing.pem"), "", "");
  EXPECT_TRUE(absl::IsInvalidArgument(missing.status())) << missing.status();
  EXPECT_TRUE(
      absl::StrContains(missing.status().message(), pki_->Path("missing.pem")))
      << missing.status();
  auto csr = TlsOptions::FromFiles(pki_->Path("eng.csr"), "", "");
  EXPECT_TRUE(absl::IsInvalidArgument(csr.status())) << csr.status();
  auto half = TlsOptions::FromFiles("", pki_->Path("eng.pem"), "");
  EXPECT_TRUE(absl::IsInvalidArgument(half.status())) << half.status();
  auto swapped =
      TlsOptions::FromFiles("", pki_->Path("eng.pem"), pki_->Path("eng.pem"));
  EXPECT_TRUE(absl::IsInvalidArgument(swapped.status())) << swapped.status();
}

}  // namespace
}  // namespace statecache::testing
