#include "runtime/c_api_errors.h"

namespace rtd::c_api {
namespace {
thread_local std::string t_error;
thread_local int t_category = 0;
}  // namespace

const std::string& last_error() { return t_error; }
int last_category() { return t_category; }

void clear_error() {
  t_error.clear();
  t_category = 0;
}

void set_error(const Error& e) {
  t_error = e.what();
  t_category = static_cast<int>(e.category()) + 1;
}

void set_error(const std::string& message, ErrorCategory category) {
  t_error = message;
  t_category = static_cast<int>(category) + 1;
}

}  // namespace rtd::c_api
