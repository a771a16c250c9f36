// rtd::Error and the names of its categories.
#include "rt_dist/error.h"

namespace rtd {

const char* to_string(ErrorCategory category) {
  switch (category) {
    case ErrorCategory::kInvalidArgument:
      return "invalid argument";
    case ErrorCategory::kConfig:
      return "configuration";
    case ErrorCategory::kUnavailable:
      return "unavailable";
    case ErrorCategory::kTimeout:
      return "timeout";
    case ErrorCategory::kBackend:
      return "backend";
    case ErrorCategory::kInternal:
      return "internal";
  }
  return "unknown";
}

Error::Error(ErrorCategory category, const std::string& message, int backend_code)
    : std::runtime_error(message), category_(category), backend_code_(backend_code) {}

}  // namespace rtd
