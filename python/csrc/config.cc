#include "config.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <string>

namespace rtd_torch {
namespace {

// The variable's value as one of two words (unset or empty: the default).
bool choice(const char* name, const char* yes, const char* no, bool fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    return fallback;
  }
  const std::string value = v;
  if (value == yes || value == no) {
    return value == yes;
  }
  C10_THROW_ERROR(ValueError, std::string(name) + "='" + value + "': use " + yes + " or " + no);
}

}  // namespace

BackendConfig BackendConfig::from_env() {
  BackendConfig c;
  c.copy_engines = choice("RTD_TORCH_COPY_ENGINES", "1", "0", false);
  c.high_priority_stream = choice("RTD_TORCH_STREAM_PRIORITY", "high", "default", true);
  return c;
}

}  // namespace rtd_torch
