// The control plane's TLS credentials (tls.h).
#include "runtime/core/store/tls.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "rt_dist/error.h"

namespace rtd {
namespace {

// The file's text; "" with *why set when it cannot be read or is not PEM.
std::string read_pem(const std::string& flag, const std::string& path, std::string* why) {
  std::ifstream in(path);
  if (!in) {
    *why = flag + "=" + path + ": cannot read it";
    return "";
  }
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().find("-----BEGIN ") == std::string::npos) {
    *why = flag + "=" + path + ": holds no PEM block (-----BEGIN ...)";
    return "";
  }
  return text.str();
}

struct Pems {
  std::string cert, key, ca;
};

// The three files' text, each read once; *why says what is missing, or the
// first file that cannot be read or holds no PEM.
Pems read_pems(const TlsFiles& tls, std::string* why) {
  std::string missing;
  for (const auto& [flag, path] :
       {std::pair<const char*, const std::string&>{"--tls-cert", tls.cert},
        {"--tls-key", tls.key},
        {"--tls-ca", tls.ca}}) {
    if (path.empty()) missing += (missing.empty() ? "" : ", ") + std::string(flag);
  }
  if (!missing.empty()) {
    *why =
        "TLS needs --tls-cert, --tls-key and --tls-ca together (or DTRUN_TLS_CERT, "
        "DTRUN_TLS_KEY and DTRUN_TLS_CA); missing: " +
        missing;
    return {};
  }
  Pems p;
  p.cert = read_pem("--tls-cert", tls.cert, why);
  if (why->empty()) p.key = read_pem("--tls-key", tls.key, why);
  if (why->empty()) p.ca = read_pem("--tls-ca", tls.ca, why);
  return p;
}

// The pinned names (--tls-peer-names), trimmed, empty entries left out.
std::vector<std::string> pinned_names(const std::string& list) {
  std::vector<std::string> names;
  std::stringstream items(list);
  for (std::string item; std::getline(items, item, ',');) {
    const auto first = item.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    names.push_back(item.substr(first, item.find_last_not_of(" \t") - first + 1));
  }
  return names;
}

// After the chain is verified against the CA: the peer's certificate must
// name one of the pinned names (its common name, or a DNS, IP or URI name).
class PinnedNames final : public grpc::experimental::ExternalCertificateVerifier {
 public:
  explicit PinnedNames(std::vector<std::string> names) : names_(std::move(names)) {}
  bool Verify(grpc::experimental::TlsCustomVerificationCheckRequest* request,
              std::function<void(grpc::Status)>, grpc::Status* status) override {
    std::vector<std::string> held;
    if (!request->common_name().empty())
      held.emplace_back(request->common_name().data(), request->common_name().size());
    for (const auto& list : {request->dns_names(), request->ip_names(), request->uri_names()}) {
      for (const grpc::string_ref& n : list) held.emplace_back(n.data(), n.size());
    }
    for (const std::string& name : held) {
      if (std::find(names_.begin(), names_.end(), name) != names_.end()) {
        *status = grpc::Status::OK;
        return true;
      }
    }
    std::string said;
    for (const std::string& name : held) said += (said.empty() ? "" : ", ") + name;
    std::string pinned;
    for (const std::string& name : names_) pinned += (pinned.empty() ? "" : ",") + name;
    *status = grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                           "the peer's certificate names " + (said.empty() ? "nothing" : said) +
                               ", none of --tls-peer-names=" + pinned);
    return true;
  }
  void Cancel(grpc::experimental::TlsCustomVerificationCheckRequest*) override {}

 private:
  const std::vector<std::string> names_;
};

// The certificates of the files, for gRPC's TLS credentials (pinned names).
std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider(const Pems& p) {
  return std::make_shared<grpc::experimental::StaticDataCertificateProvider>(
      p.ca, std::vector<grpc::experimental::IdentityKeyCertPair>{{p.key, p.cert}});
}

// The options' certificates watched, and the peer checked against the pinned names.
template <typename Options>
void pin(Options& o, const TlsFiles& tls) {
  o.watch_root_certs();
  o.watch_identity_key_cert_pairs();
  o.set_certificate_verifier(grpc::experimental::ExternalCertificateVerifier::Create<PinnedNames>(
      pinned_names(tls.peer_names)));
}

Pems read_all(const TlsFiles& tls) {
  std::string why;
  Pems p = read_pems(tls, &why);
  if (!why.empty()) throw Error(ErrorCategory::kConfig, why);
  return p;
}

}  // namespace

std::string tls_problem(const TlsFiles& tls) {
  if (!tls.enabled()) {
    return tls.peer_names.empty()
               ? ""
               : "--tls-peer-names pins the names of TLS peers: it needs --tls-cert, --tls-key "
                 "and --tls-ca (or DTRUN_TLS_CERT, DTRUN_TLS_KEY and DTRUN_TLS_CA)";
  }
  if (!tls.peer_names.empty() && pinned_names(tls.peer_names).empty())
    return "--tls-peer-names='" + tls.peer_names + "' holds no name";
  std::string why;
  read_pems(tls, &why);
  return why;
}

std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const TlsFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  const Pems p = read_all(tls);
  if (!tls.peer_names.empty()) {
    // The chain checked against the CA, and the server's certificate
    // against the pinned names (instead of against the address dialled).
    grpc::experimental::TlsChannelCredentialsOptions o;
    o.set_certificate_provider(provider(p));
    pin(o, tls);
    o.set_verify_server_certs(true);
    o.set_check_call_host(false);
    return grpc::experimental::TlsCredentials(o);
  }
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = p.ca;
  o.pem_private_key = p.key;
  o.pem_cert_chain = p.cert;
  return grpc::SslCredentials(o);
}

std::shared_ptr<grpc::ServerCredentials> server_credentials(const TlsFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  const Pems p = read_all(tls);
  if (!tls.peer_names.empty()) {
    grpc::experimental::TlsServerCredentialsOptions o(provider(p));
    pin(o, tls);
    o.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    return grpc::experimental::TlsServerCredentials(o);
  }
  grpc::SslServerCredentialsOptions o(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = p.ca;
  o.pem_key_cert_pairs.push_back({p.key, p.cert});
  return grpc::SslServerCredentials(o);
}

}  // namespace rtd
