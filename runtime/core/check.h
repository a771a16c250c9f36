// Checks for the errors of C calls (errno) and invariants; see STYLE.md 3.3.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "rt_dist/error.h"

// Evaluates expr, retrying while it fails with EINTR; throws rtd::Error(kBackend) naming what on
// -1.
#define RTD_SYS_CHECK(expr, what)                                                       \
  ([&]() {                                                                              \
    for (;;) {                                                                          \
      auto rtd_rc_ = (expr);                                                            \
      if (rtd_rc_ != -1) return rtd_rc_;                                                \
      if (errno == EINTR) continue;                                                     \
      int rtd_err_ = errno;                                                             \
      throw ::rtd::Error(::rtd::ErrorCategory::kBackend,                                \
                         std::string(what) + ": " + std::strerror(rtd_err_), rtd_err_); \
    }                                                                                   \
  }())

// An invariant of the library itself: not catchable, aborts with a message.
#define RTD_ASSERT(cond, msg)                                                                \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "rt_dist internal error at %s:%d: %s (%s)\n", __FILE__, __LINE__, \
                   std::string(msg).c_str(), #cond);                                         \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)
