// join_rendezvous: an agent's side of the round: wait (up to the rendezvous
// timeout) for node rank 0's server to answer, then join and get the layout.
#pragma once

#include <chrono>
#include <string>

#include "rendezvous.pb.h"
#include "runtime/core/tls_files.h"

namespace rtd::launcher {

// Throws rtd::Error: kUnavailable when the server never answered (within
// connect_timeout, when given and shorter) or closed the call, kConfig when
// the round failed (disagreeing nodes, wrong token), kTimeout when nodes were missing.
proto::JoinResponse join_rendezvous(const std::string& address, const std::string& token,
                                    const proto::JoinRequest& request, std::chrono::seconds timeout,
                                    const TlsFiles& tls = {},
                                    std::chrono::seconds connect_timeout = {});

}  // namespace rtd::launcher
