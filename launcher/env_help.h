// dtrun --help-env: every environment variable librt_dist and dtrun read
// (rtd::config_table), as text for a reader or as JSON, from which
// docs/gen_config.py generates docs/config.md's table.
#pragma once

#include <string>

namespace rtd::launcher {

std::string env_help_text();
std::string env_help_json();

}  // namespace rtd::launcher
