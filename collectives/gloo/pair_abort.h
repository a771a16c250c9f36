// Failing what waits on Gloo's connections, for GlooCommunicator::abort():
// an operation in flight otherwise ends only at Gloo's timeout when its peer
// is gone without closing its connections (a host cut off).
#pragma once

#include <gloo/context.h>

#include <string>

namespace rtd::gloo_backend {

// Every operation of `context` waiting on its connection to `peer` fails
// with `why` (as when that connection breaks), including one whose bytes
// are being read or written on it. False where the pair is not Gloo's TCP one.
bool fail_pair(::gloo::Context& context, int peer, const std::string& why);

}  // namespace rtd::gloo_backend
