#include "errors.h"

#include <c10/util/Exception.h>

#include "rt_dist/c_api.h"

namespace rtd_torch {

void raise_last_error(const std::string& where) {
  const std::string message = rtd_last_error();
  const int category = rtd_last_error_category();
  if (category == 1) {  // invalid argument
    C10_THROW_ERROR(ValueError, where + ": " + message);
  }
  if (category == 4) {  // a timeout: said the way torch's backends say it
    raise_failure(where, "Timed out (" + message + ")");
  }
  raise_failure(where, message);
}

void raise_failure(const std::string& where, const std::string& message) {
  C10_THROW_ERROR(DistBackendError, where + ": " + message);
}

}  // namespace rtd_torch
