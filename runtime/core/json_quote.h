// A string as a JSON string literal: quotes, backslashes and control
// characters escaped (what librt_dist writes as JSON: safetensors headers,
// dtrun --help-env=json).
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace rtd {

inline std::string json_quote(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof(esc), "\\u%04x", c);
      out += esc;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace rtd
