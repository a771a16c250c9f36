// The rtd backend's settings, read from the environment once, when a group
// is made (the only place the extension reads it).
#pragma once

namespace rtd_torch {

struct BackendConfig {
  // RTD_TORCH_COPY_ENGINES (0 or 1, default 0): NCCL's all-reduces of sums
  // and averages within one host by copy engines (docs/torch.md).
  bool copy_engines = false;
  // RTD_TORCH_STREAM_PRIORITY (high or default; default high): the NCCL
  // communicator's stream at the device's highest priority, or at the
  // default one (ProcessGroupNCCL's).
  bool high_priority_stream = true;

  // Throws ValueError naming a variable whose value is not one of its own.
  static BackendConfig from_env();
};

}  // namespace rtd_torch
