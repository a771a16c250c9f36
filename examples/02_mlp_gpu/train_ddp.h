// Data-parallel training of the MLP with rtd::DDP: each layer's gradient
// reduced while backward goes on, its update started as soon as it is.
// With recover, in-process recovery (rtd::Recovery, dtrun
// --recovery=in-process): a lost worker's peers keep their processes and
// CUDA contexts, rebuild NCCL with its replacement, and the replacement
// receives the weights and AdamW's moments from them.
#pragma once

#include <cuda_runtime_api.h>

#include "examples/02_mlp_gpu/model.h"
#include "examples/02_mlp_gpu/run_common.h"
#include "rt_dist/rt_dist.h"

namespace mlp {

struct DdpRun {
  int steps = 30;
  int log_every = 10;
  CkptFlags ckpt;
  bool recover = false;
  int kill_at_step = 0;  // the last rank kills itself there once (tests, benchmarks)
};

void train_ddp(rtd::Context& ctx, const MlpConfig& config, const rtd::DDPOptions& options,
               const DdpRun& run, cudaStream_t stream);

}  // namespace mlp
