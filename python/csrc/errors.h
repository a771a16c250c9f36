// How a failure of librt_dist's C interface becomes the exception a torch
// user catches: the message names the collective, the rank and the group.
#pragma once

#include <string>

namespace rtd_torch {

// Throws for the last failure on this thread (rtd_last_error): ValueError
// for an invalid argument, DistBackendError for everything else (a timeout
// says "timed out" in its message).
[[noreturn]] void raise_last_error(const std::string& where);

// Throws DistBackendError with the message of a failure read elsewhere.
[[noreturn]] void raise_failure(const std::string& where, const std::string& message);

}  // namespace rtd_torch
