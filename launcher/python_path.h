// Where the rt_dist Python package of this dtrun lies, so that workers import
// `rt_dist.torch` (the rtd backend of torch.distributed) with nothing installed.
#pragma once

#include <string>

namespace rtd::launcher {

// The folder holding rt_dist/ that belongs to the dtrun at `exe`: the
// installed one (<prefix>/<libdir>/rt_dist/python) or the build tree's
// (<build>/python); "" when neither is there.
std::string rt_dist_python_dir(const std::string& exe);

// PYTHONPATH with dir first; current as it was when dir is "" or already first.
std::string python_path_with(const std::string& dir, const std::string& current);

}  // namespace rtd::launcher
