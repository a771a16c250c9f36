// Field checks of the rendezvous requests (request_checks.h).
#include "launcher/request_checks.h"

namespace rtd::launcher {
namespace {

bool is_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// An address or host name: letters, digits and ".:-_[]%" (IPv6, zone ids).
bool host_chars(const std::string& s) {
  for (char c : s) {
    if (!is_alnum(c) && std::string_view(".:-_[]%").find(c) == std::string_view::npos) return false;
  }
  return true;
}

bool id_chars(const std::string& s) {
  for (char c : s) {
    if (!is_alnum(c) && c != '-' && c != '_') return false;
  }
  return true;
}

bool printable(const std::string& s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  return true;
}

std::string out_of_range(const char* field, long long value, long long lo, long long hi) {
  return std::string(field) + " is " + std::to_string(value) + ", not in [" + std::to_string(lo) +
         ", " + std::to_string(hi) + "]";
}

std::string bad_string(const char* field, const std::string& value, std::size_t most,
                       bool (*allowed)(const std::string&), const char* which) {
  if (value.empty()) return std::string(field) + " is empty";
  if (value.size() > most)
    return std::string(field) + " has " + std::to_string(value.size()) + " characters, more than " +
           std::to_string(most);
  if (!allowed(value)) return std::string(field) + " holds characters other than " + which;
  return "";
}

}  // namespace

std::string malformed_join(const proto::JoinRequest& r) {
  if (std::string why =
          bad_string("host", r.host(), kMaxHostChars, host_chars, "letters, digits and .:-_[]%");
      !why.empty())
    return why;
  if (std::string why =
          bad_string("node_id", r.node_id(), kMaxNodeIdChars, id_chars, "letters, digits, - and _");
      !why.empty())
    return why;
  if (r.fingerprint().size() > kMaxFingerprintChars || !printable(r.fingerprint()))
    return "fingerprint is longer than " + std::to_string(kMaxFingerprintChars) +
           " characters or not printable";
  if (!r.agent_secret().empty()) {
    if (std::string why = bad_string("agent_secret", r.agent_secret(), kMaxSecretChars, id_chars,
                                     "letters and digits");
        !why.empty())
      return why;
  }
  if (r.nproc_per_node() < 1 || r.nproc_per_node() > kMaxProcPerNode)
    return out_of_range("nproc_per_node", r.nproc_per_node(), 1, kMaxProcPerNode);
  if (r.nnodes() < 1 || r.nnodes() > kMaxNodes)
    return out_of_range("nnodes", r.nnodes(), 1, kMaxNodes);
  if (r.min_nodes() < 1 || r.min_nodes() > r.nnodes())
    return out_of_range("min_nodes", r.min_nodes(), 1, r.nnodes());
  // -1 asks the host to assign one; any other negative rank is malformed.
  if (r.node_rank() < -1 || r.node_rank() >= r.nnodes())
    return out_of_range("node_rank", r.node_rank(), -1, r.nnodes() - 1);
  if (r.last_round() < -1) return out_of_range("last_round", r.last_round(), -1, INT32_MAX);
  if (r.restarts() < 0 || r.restarts() > kMaxRestarts)
    return out_of_range("restarts", r.restarts(), 0, kMaxRestarts);
  return "";
}

std::string malformed_heartbeat(const proto::HeartbeatRequest& r) {
  if (r.round() < 0) return out_of_range("round", r.round(), 0, INT32_MAX);
  if (r.node_rank() < 0 || r.node_rank() >= kMaxNodes)
    return out_of_range("node_rank", r.node_rank(), 0, kMaxNodes - 1);
  if (!proto::HeartbeatRequest::State_IsValid(r.state()))
    return "state " + std::to_string(static_cast<int>(r.state())) + " is not a known state";
  if (r.hold_ms() < 0) return out_of_range("hold_ms", r.hold_ms(), 0, INT32_MAX);
  if (r.keys_size() > kMaxHeartbeatKeys)
    return "names " + std::to_string(r.keys_size()) + " keys, more than " +
           std::to_string(kMaxHeartbeatKeys);
  for (const std::string& key : r.keys()) {
    if (key.empty() || key.size() > kMaxHeartbeatKeyBytes)
      return "a key of " + std::to_string(key.size()) + " bytes (1 to " +
             std::to_string(kMaxHeartbeatKeyBytes) + " allowed)";
  }
  if (r.agent_secret().size() > kMaxSecretChars)
    return "agent_secret has more than " + std::to_string(kMaxSecretChars) + " characters";
  return "";
}

}  // namespace rtd::launcher
