// The MLP's training state as checkpoint tensors, named alike whether DDP or
// FSDP holds it ("layer<l>.weight" and its ".exp_avg" / ".exp_avg_sq", the
// AdamW step count in "fsdp.steps"), so that a checkpoint of either loads
// in the other, on any number of GPUs. Public API only.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
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

// A checksum of the fp32 weights in `state` (the tensors without a suffix),
// equal for equal weights however they are split over ranges and ranks: the
// sum over elements of a mix of (tensor, element, bits), summed over the
// ranks through the store. Collective; copies the ranges to the host.
inline std::uint64_t weights_checksum(rtd::Context& ctx, const rtd::ckpt::State& state,
                                      const std::string& key) {
  auto mix = [](std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  std::uint64_t sum = 0;
  std::vector<std::uint32_t> host;
  for (std::size_t t = 0; t < state.tensors.size(); ++t) {
    const rtd::ckpt::Tensor& tensor = state.tensors[t];
    if (tensor.name.find(".weight") + 7 != tensor.name.size()) continue;
    for (const rtd::ckpt::Range& r : tensor.ranges) {
      host.resize(r.count);
      if (r.device == rtd::DeviceType::kCpu)  // offloaded states live in host memory
        std::memcpy(host.data(), r.data, r.count * 4);
      else if (cudaError_t rc =
                   cudaMemcpy(host.data(), r.data, r.count * 4, cudaMemcpyDeviceToHost);
               rc != cudaSuccess)
        throw std::runtime_error(std::string("weights checksum: copying '") + tensor.name +
                                 "' to the host failed: " + cudaGetErrorString(rc));
      for (std::size_t i = 0; i < r.count; ++i)
        sum += mix((std::uint64_t(t) << 40 | (r.first + i)) * 0x9E3779B97F4A7C15ull ^ host[i]);
    }
  }
  ctx.store().set(key + std::to_string(ctx.rank()), std::to_string(sum));
  std::uint64_t total = 0;
  for (int r = 0; r < ctx.world_size(); ++r)
    total += std::stoull(ctx.store().get(key + std::to_string(r), std::chrono::minutes(5)));
  return total;
}

}  // namespace mlp
