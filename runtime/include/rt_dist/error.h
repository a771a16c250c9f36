// rtd::Error: the one exception type of the public API. Its category tells the
// caller what to do (fix the input, retry, abort and restart, report a bug).
#pragma once

#include <stdexcept>
#include <string>

namespace rtd {

enum class ErrorCategory {
  kInvalidArgument,  // fix the call; retrying will not help
  kConfig,           // fix the environment or flags
  kUnavailable,      // network or rendezvous: retry with backoff
  kTimeout,          // a deadline passed: abort the communicator, restart the job
  kBackend,          // NCCL, MPI or Gloo failed: abort, restart
  kInternal,         // a bug in librt_dist
};

const char* to_string(ErrorCategory category);

class Error : public std::runtime_error {
 public:
  Error(ErrorCategory category, const std::string& message, int backend_code = 0);

  ErrorCategory category() const { return category_; }
  int backend_code() const { return backend_code_; }

 private:
  ErrorCategory category_;
  int backend_code_;
};

}  // namespace rtd
