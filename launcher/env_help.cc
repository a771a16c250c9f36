#include "launcher/env_help.h"

#include <cstdio>

#include "runtime/core/config.h"

namespace rtd::launcher {
namespace {

std::string json_string(const char* s) {
  std::string out = "\"";
  for (const char* p = s; *p; ++p) {
    const unsigned char c = static_cast<unsigned char>(*p);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

std::string env_help_text() {
  std::string out =
      "Environment variables librt_dist (in each worker) and dtrun read;\n"
      "docs/config.md has them with the rt_dist Python package's.\n";
  for (const auto& v : config_table()) {
    out += "\n" + std::string(v.name) + " (" + v.unit +
           (*v.default_value ? std::string(", default ") + v.default_value : std::string()) +
           "; read by " + v.readers + ")\n    " + v.doc + "\n";
  }
  return out;
}

std::string env_help_json() {
  std::string out = "[";
  bool first = true;
  for (const auto& v : config_table()) {
    out += first ? "\n" : ",\n";
    first = false;
    out += "  {\"name\": " + json_string(v.name) +
           ", \"default\": " + json_string(v.default_value) + ", \"unit\": " + json_string(v.unit) +
           ", \"readers\": " + json_string(v.readers) + ", \"meaning\": " + json_string(v.doc) +
           "}";
  }
  return out + "\n]\n";
}

}  // namespace rtd::launcher
