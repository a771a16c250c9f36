// The rendezvous service's door: every field of a Join or Heartbeat request
// checked before any of it reaches a Round or the Membership (ranks, counts,
// strings' lengths and characters). A request that fails is refused for its
// caller alone; nothing of it is kept.
#pragma once

#include <string>

#include "rendezvous.pb.h"

namespace rtd::launcher {

// The largest values a request may carry; far above any real job.
inline constexpr int kMaxNodes = 1 << 20;
inline constexpr int kMaxProcPerNode = 4096;
inline constexpr int kMaxRestarts = 1 << 20;
inline constexpr std::size_t kMaxHostChars = 255;
inline constexpr std::size_t kMaxNodeIdChars = 64;
inline constexpr std::size_t kMaxFingerprintChars = 1024;
inline constexpr std::size_t kMaxSecretChars = 64;
inline constexpr int kMaxHeartbeatKeys = 16;
inline constexpr std::size_t kMaxHeartbeatKeyBytes = 512;

// Empty when the request is well formed; else what is wrong with it, in a
// sentence naming the field and the allowed values.
std::string malformed_join(const proto::JoinRequest& request);
std::string malformed_heartbeat(const proto::HeartbeatRequest& request);

}  // namespace rtd::launcher
