// librt_dist, opened at run time (dlopen, RTLD_LOCAL) rather than linked:
// torch's own libraries carry a Gloo of another version under the same
// symbol names, and a link-time dependency would let librt_dist's calls into
// its Gloo bind to torch's. Opened locally, librt_dist and its Gloo resolve
// among themselves, as they do for any other caller. The C interface's
// functions are defined in this extension (hidden) and forward to it.
#pragma once

#include <string>

namespace rtd_torch {

// Opens librt_dist at `path` and checks its interface version; throws
// ImportError naming the path and what is wrong. Once per process (later
// calls with the same path do nothing).
void load_c_api(const std::string& path);

}  // namespace rtd_torch
