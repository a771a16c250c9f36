// The control plane's TLS credentials (tls.h).
#include "runtime/core/store/tls.h"

#include <fstream>
#include <sstream>

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

Pems read_all(const TlsFiles& tls) {
  std::string why;
  Pems p = read_pems(tls, &why);
  if (!why.empty()) throw Error(ErrorCategory::kConfig, why);
  return p;
}

}  // namespace

std::string tls_problem(const TlsFiles& tls) {
  if (!tls.enabled()) return "";
  std::string why;
  read_pems(tls, &why);
  return why;
}

std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const TlsFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  const Pems p = read_all(tls);
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = p.ca;
  o.pem_private_key = p.key;
  o.pem_cert_chain = p.cert;
  return grpc::SslCredentials(o);
}

std::shared_ptr<grpc::ServerCredentials> server_credentials(const TlsFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  const Pems p = read_all(tls);
  grpc::SslServerCredentialsOptions o(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = p.ca;
  o.pem_key_cert_pairs.push_back({p.key, p.cert});
  return grpc::SslServerCredentials(o);
}

}  // namespace rtd
