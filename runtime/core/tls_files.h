// The files of the control plane's mutual TLS (DTRUN_TLS_* or dtrun's
// --tls-*), apart from the credentials made of them (store/tls.h), so that
// the configuration can hold them without gRPC's headers.
#pragma once

#include <string>

namespace rtd {

struct TlsFiles {
  std::string cert;  // this node's certificate chain (PEM); it names the --rdzv host
  std::string key;   // its private key (PEM)
  std::string ca;    // the CA that signed every node's certificate (PEM)
  bool enabled() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

}  // namespace rtd
