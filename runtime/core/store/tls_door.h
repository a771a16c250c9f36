// The door of a control-plane server that speaks TLS: an accept loop of our
// own in front of gRPC, so that a connection refused at the TLS handshake (a
// certificate another CA signed, a name not pinned, none at all) is logged
// with the peer's address, which gRPC's own log of the handshake lacks.
//
// Each accepted connection is handed to gRPC (ServerBuilder's external
// connection acceptor); the door keeps a duplicate of its descriptor, reading
// nothing from it, until the connection carries its first call (every
// service of the control plane reports its calls' peers: note_call) or ends.
// One that ends before any call was refused at the handshake (or left during
// it): the door names its peer. A duplicate held 30 s without news is let go.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "runtime/core/tls_files.h"

namespace rtd {

class TlsDoor {
 public:
  // Listens on ip:port (port 0: a free one); `server` names the server in
  // log lines. Throws rtd::Error(kConfig) naming the address when it cannot.
  TlsDoor(const std::string& ip, int port, std::string server);
  ~TlsDoor();  // close()
  TlsDoor(const TlsDoor&) = delete;
  TlsDoor& operator=(const TlsDoor&) = delete;

  int port() const;
  // Before builder.BuildAndStart(): gRPC takes the door's connections, with creds.
  void attach(grpc::ServerBuilder& builder, std::shared_ptr<grpc::ServerCredentials> creds);
  // After BuildAndStart(): connections are accepted from now on.
  void open();
  // Stops accepting and lets every duplicate go; before the server shuts down.
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Where a control-plane server listens: with TLS, through a door (returned:
// open() it after BuildAndStart, close() it before Shutdown; *port is set
// now), without, on gRPC's own port (nullptr; *port is set by BuildAndStart).
std::unique_ptr<TlsDoor> add_control_port(grpc::ServerBuilder& builder, const std::string& ip,
                                          int port, const TlsFiles& tls, const std::string& server,
                                          int* selected_port);

// A call reached a service (check_token says so for every one): its
// connection got past the handshake. Cheap where no door is open.
void note_call(const grpc::ServerContextBase& ctx);

// "ip:port" for gRPC's peer string ("ipv4:10.0.0.2:4567", "ipv6:[::1]:80",
// "ipv6:%5B::ffff:10.0.0.2%5D:80"): an IPv4 address mapped into IPv6 as
// the IPv4 one, brackets around other IPv6 ones; "" for other kinds.
std::string door_peer_key(const std::string& grpc_peer);

}  // namespace rtd
