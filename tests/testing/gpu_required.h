// RTD_REQUIRE_GPU=1 (set on the GPU machine): a test binary that finds no
// usable GPU fails instead of skipping, so that a broken GPU or driver cannot
// pass as "skipped".
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace rtd::testing_util {

inline bool gpu_required() {
  const char* v = std::getenv("RTD_REQUIRE_GPU");
  return v && std::strcmp(v, "1") == 0;
}

// The exit code of a GPU test binary that found no GPU (why): 77 (CTest's
// skip) or, when a GPU is required, 1; says which on stderr.
inline int no_gpu_exit(const std::string& why) {
  if (gpu_required()) {
    std::fprintf(stderr, "FAILED: RTD_REQUIRE_GPU=1 but %s\n", why.c_str());
    return 1;
  }
  std::fprintf(stderr, "skipped: %s\n", why.c_str());
  return 77;
}

}  // namespace rtd::testing_util
