// The MLP's weights under rtd::FSDP, shared by the trainer (main.cc) and the
// step benchmark: one unit per layer built from the model's initial weights,
// and the layer hooks that tell FSDP where forward and backward are.
// Public API only. The model must have been built with external_weights.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <stdexcept>
#include <vector>

#include "examples/02_mlp_gpu/model.h"
#include "rt_dist/rt_dist.h"

namespace mlp {

// Collective: every rank builds the same FSDP. Synchronizes the device (the
// initial weights are copied into the shards on the default stream).
inline std::unique_ptr<rtd::FSDP> shard_model(rtd::Context& ctx, const Model& model, int layers,
                                              const rtd::FSDPOptions& options, cudaStream_t s) {
  const std::size_t n = model.layer_elems();
  float* initial = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&initial), n * layers * sizeof(float)) != cudaSuccess)
    throw std::runtime_error("no device memory for the initial weights");
  model.init_master(initial, s);
  cudaStreamSynchronize(s);
  std::vector<std::vector<rtd::BufferView>> units;
  for (int l = 0; l < layers; ++l)
    units.push_back(
        {{initial + l * n, n, rtd::DType::kFloat32, rtd::DeviceType::kCuda, ctx.local_rank()}});
  // The plan (computed without the engine) against what building it took.
  rtd::FSDPOptions planned = options;
  if (planned.strategy == rtd::ShardStrategy::kHybrid && planned.shard_group_size == 0)
    planned.shard_group_size = ctx.world().local_world_size;
  const rtd::FSDPMemoryPlan plan = rtd::FSDP::plan(
      std::vector<std::vector<std::size_t>>(layers, {n}), ctx.world_size(), planned);
  std::size_t free_before = 0, free_after = 0, total = 0;
  cudaMemGetInfo(&free_before, &total);
  auto fsdp = std::make_unique<rtd::FSDP>(ctx, units, options);
  cudaDeviceSynchronize();
  cudaMemGetInfo(&free_after, &total);
  if (ctx.rank() == 0) {
    std::printf(
        "memory plan: %.3f GiB of model states per rank (FSDP::plan); the engine holds "
        "%.3f GiB (%.3f of it collectives' scratch); the GPU's free memory fell by %.3f GiB\n",
        plan.total() / 1073741824.0, fsdp->state_bytes() / 1073741824.0,
        fsdp->scratch_bytes() / 1073741824.0,
        (static_cast<double>(free_before) - static_cast<double>(free_after)) / 1073741824.0);
  }
  cudaFree(initial);
  return fsdp;
}

// Hooks that read layer l's 16-bit weights from FSDP (param_dtype bfloat16 or
// float16, the model's products' type).
inline LayerHooks fsdp_hooks(rtd::FSDP& fsdp, rtd::StreamRef s) {
  return LayerHooks{
      .weight = [&fsdp](int l) { return static_cast<const void*>(fsdp.param(l, 0).data); },
      .before_forward = [&fsdp, s](int l) { fsdp.pre_forward(l, s); },
      .after_forward = [&fsdp, s](int l) { fsdp.post_forward(l, s); },
      .before_backward = [&fsdp, s](int l) { fsdp.pre_backward(l, s); }};
}

}  // namespace mlp
