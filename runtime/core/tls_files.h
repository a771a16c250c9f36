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
  // Pinned names, comma-separated (empty: any certificate the CA signed): a
  // peer is accepted only if its certificate's common name or one of its
  // DNS, IP or URI names is among them.
  std::string peer_names;
  bool enabled() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

}  // namespace rtd
