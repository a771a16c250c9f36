// A warning raised in the Python program (warnings.warn, RuntimeWarning)
// from C++ code that may run with or without the GIL, and during teardown:
// nothing is raised once the interpreter is finalizing, and a warning turned
// into an error is dropped (it cannot cross a destructor).
#pragma once

#include <string>

namespace rtd_torch {

void warn_python(const std::string& message);

}  // namespace rtd_torch
