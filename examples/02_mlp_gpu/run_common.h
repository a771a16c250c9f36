// What both of mlp_gpu's trainings share: the checkpoint flags and their
// save/resume, the progress line every few steps, the final checksum.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "examples/02_mlp_gpu/model.h"
#include "examples/02_mlp_gpu/wait_timer.h"
#include "rt_dist/rt_dist.h"

namespace mlp {

struct CkptFlags {
  std::string dir;
  int every = 0;
  bool async = false;
  std::string data;  // inputs from shard files there, through the loader
};

// What a user watches, every log_every steps (rank 0): the loss, then over
// the steps since the last line the tokens/s, the step time, how long the
// training stream waited for communication, and the GPU memory in use.
struct Progress {
  std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
  int steps = 0;  // since the last line
  WaitTimer waits;
};

void report(rtd::Context& ctx, Model& model, const MlpConfig& config, int step, int first_step,
            int log_every, int steps, Progress& p, cudaStream_t stream);
// The final weights' checksum, equal for equal weights whatever the strategy
// or the number of GPUs.
void print_checksum(rtd::Context& ctx, const rtd::ckpt::State& state);
std::unique_ptr<rtd::ckpt::Checkpointer> open_checkpoints(rtd::Context& ctx, const CkptFlags& f);
// Loads the latest valid checkpoint into `state` (and the loader's position);
// returns the step to start at.
int resume(rtd::Context& ctx, rtd::ckpt::Checkpointer* ckpt, rtd::ckpt::State& state,
           rtd::data::Loader* inputs);
// Saves at every f.every-th step: in the background on the training stream's
// order, or now once the stream's work is done.
void maybe_save(rtd::ckpt::Checkpointer* ckpt, const CkptFlags& f, int step,
                const std::function<rtd::ckpt::State()>& make_state, rtd::data::Loader* inputs,
                cudaStream_t stream);

}  // namespace mlp
