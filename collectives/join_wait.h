// Waiting for a peer to join a communicator (its key in the store): a live
// warning every `warn_every` while it has not, and at the deadline an error
// that names the peer, the communicator and how long was waited, instead of
// the store's "key did not appear".
#pragma once

#include <chrono>
#include <string>

#include "rt_dist/store.h"

namespace rtd {

struct JoinWait {
  std::string communicator;  // its name, e.g. "default"
  int rank = 0;              // the rank that waits
  std::string peer;          // who should have written the key, e.g. "rank 1"
  std::chrono::milliseconds timeout{300'000};
  std::chrono::milliseconds warn_every{60'000};  // 0: no live warning
};

std::string await_join(Store& store, const std::string& key, const JoinWait& wait);

}  // namespace rtd
