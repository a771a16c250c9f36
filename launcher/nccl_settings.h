// NCCL settings across a job: --nccl-preset (or RTD_NCCL_PRESET) fills in the
// documented NCCL_* values for a fabric, where the user has not set them;
// and at every round the nodes compare the settings their workers will run
// with (NCCL_*, RTD_*, the NCCL and rt_dist versions), so that a difference
// that breaks or slows a job fails it on every node, naming each node's
// value, instead of hanging it. Pure functions; the agent does the I/O.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "launcher/doctor/facts.h"
#include "runtime/core/config.h"

namespace rtd::launcher {

enum class NcclPreset { kNone, kNvlink, kIb, kRoce, kTcp };
// "nvlink", "ib", "roce", "tcp" (or "" / "none"); false for anything else.
bool parse_nccl_preset(const std::string& text, NcclPreset* out);
const char* preset_name(NcclPreset p);

// The preset's values for this node (its RDMA ports choose NCCL_IB_HCA).
std::vector<std::pair<std::string, std::string>> preset_values(NcclPreset preset,
                                                               const doctor::Facts& node);

// Adds the preset's values to `overrides` (the workers' extra environment)
// where neither `parent` (dtrun's environment) nor `overrides` (--env) sets
// them; returns the lines to log: what it set, and what the user's own
// settings kept.
std::vector<std::string> apply_preset(NcclPreset preset, const doctor::Facts& node,
                                      const EnvMap& parent,
                                      std::vector<std::pair<std::string, std::string>>& overrides);

using Settings = std::map<std::string, std::string>;
// The NCCL_* and RTD_* values the workers will see, and the libraries'
// versions ("library nccl", "library rt_dist").
Settings effective_settings(const EnvMap& parent,
                            const std::vector<std::pair<std::string, std::string>>& overrides,
                            const std::string& nccl_version);
std::string encode_settings(const Settings& s);  // "key=value" lines
Settings decode_settings(const std::string& text);

struct SettingsVerdict {
  std::string error;                  // empty: the job may run
  std::vector<std::string> warnings;  // differences that only may slow it
};
// Compares the nodes' settings (index = node rank). Breaking: the NCCL or
// rt_dist versions, NCCL_PROTO, NCCL_ALGO, NCCL_IB_DISABLE and NCCL_NET set
// on some nodes only or differently. Node-specific ones (interface and HCA
// names, debug files) are not compared; any other difference is a warning.
SettingsVerdict compare_settings(const std::vector<Settings>& nodes);

}  // namespace rtd::launcher
