#include "launcher/env_help.h"

#include "runtime/core/config.h"
#include "runtime/core/json_quote.h"

namespace rtd::launcher {

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
    out += "  {\"name\": " + json_quote(v.name) + ", \"default\": " + json_quote(v.default_value) +
           ", \"unit\": " + json_quote(v.unit) + ", \"readers\": " + json_quote(v.readers) +
           ", \"meaning\": " + json_quote(v.doc) + "}";
  }
  return out + "\n]\n";
}

}  // namespace rtd::launcher
