// The C interface's errors (rt_dist/c_api.h): the last failure's message and
// category, kept per thread, and the wrapper every entry point runs in.
#pragma once

#include <exception>
#include <string>

#include "rt_dist/error.h"

namespace rtd::c_api {

const std::string& last_error();
int last_category();  // 0: none; else the ErrorCategory's number plus one
void clear_error();
void set_error(const Error& e);
void set_error(const std::string& message, ErrorCategory category);

// Runs f, turning any exception into the thread's error; returns fallback then.
template <typename R, typename F>
R guarded(R fallback, F&& f) {
  clear_error();
  try {
    return f();
  } catch (const Error& e) {
    set_error(e);
  } catch (const std::exception& e) {
    set_error(e.what(), ErrorCategory::kInternal);
  } catch (...) {
    set_error("unknown exception", ErrorCategory::kInternal);
  }
  return fallback;
}

}  // namespace rtd::c_api
