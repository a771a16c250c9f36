// The MLP's training state as checkpoint tensors, named alike whether DDP or
// FSDP holds it ("layer<l>.weight" and its ".exp_avg" / ".exp_avg_sq", the
// AdamW step count in "fsdp.steps"), so that a checkpoint of either loads
// in the other, on any number of GPUs. Public API only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "examples/02_mlp_gpu/model.h"
#include "rt_dist/rt_dist.h"

namespace mlp {

inline std::string layer_name(int l) { return "layer" + std::to_string(l) + ".weight"; }

// FSDP's units (one per layer) named for FSDP::checkpoint_state.
inline std::vector<std::vector<rtd::ckpt::Tensor>> fsdp_names(const MlpConfig& c) {
  std::vector<std::vector<rtd::ckpt::Tensor>> names;
  for (int l = 0; l < c.layers; ++l)
    names.push_back({{layer_name(l), rtd::DType::kFloat32, {c.hidden, c.hidden}, {}}});
  return names;
}

// The DDP replica's state on the GPU: to save, each rank its slice of every
// tensor (all ranks write, none twice); to load, all of it.
inline rtd::ckpt::State ddp_state(Model& model, const MlpConfig& c, rtd::Context& ctx, bool save,
                                  int steps_taken) {
  rtd::ckpt::State state;
  const std::size_t n = model.layer_elems();
  const std::size_t lo = save ? n * ctx.rank() / ctx.world_size() : 0;
  const std::size_t hi = save ? n * (ctx.rank() + 1) / ctx.world_size() : n;
  for (int l = 0; l < c.layers; ++l) {
    float* parts[] = {model.master(l), model.exp_avg(l), model.exp_avg_sq(l)};
    const char* suffix[] = {"", ".exp_avg", ".exp_avg_sq"};
    for (int k = 0; k < 3; ++k) {
      state.tensors.push_back(rtd::ckpt::Tensor{
          layer_name(l) + suffix[k],
          rtd::DType::kFloat32,
          {c.hidden, c.hidden},
          {{lo, hi - lo, parts[k] + lo, rtd::DeviceType::kCuda, ctx.local_rank()}}});
    }
  }
  state.meta["fsdp.steps"] = std::to_string(steps_taken);
  return state;
}

}  // namespace mlp
