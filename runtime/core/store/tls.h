// Mutual TLS for the control plane (docs/dtrun.md, "TLS"): the certificate,
// key and CA files a node (and its workers) give, and the gRPC credentials
// made from them. Without files, calls go in the clear (the token then keeps
// strangers out, on a network others cannot read).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "runtime/core/tls_files.h"

namespace rtd {

// Empty when all three are given (or none); else which are missing, or a
// file that cannot be read or holds no PEM block, named.
std::string tls_problem(const TlsFiles& tls);

// Clients: TLS with this node's certificate (the server checks it against
// the CA), or insecure without files. Throws rtd::Error(kConfig) naming a
// file that cannot be read.
std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const TlsFiles& tls);
// Servers: TLS that requires and verifies the client's certificate, or
// insecure without files.
std::shared_ptr<grpc::ServerCredentials> server_credentials(const TlsFiles& tls);

}  // namespace rtd
