// Comparing secrets (job tokens, agents' secrets) in time that depends on
// their lengths only, so that a caller cannot learn one byte by byte from
// how long a refusal takes. Free of gRPC: the launcher's membership uses it.
#pragma once

#include <cstddef>
#include <string>

namespace rtd {

inline bool secrets_equal(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  return diff == 0;
}

}  // namespace rtd
