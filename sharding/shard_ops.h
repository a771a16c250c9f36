// The element-wise work of the sharded strategies, on the host or a GPU (by
// the buffers' device): the AdamW step of a shard, the sum of squares of a
// gradient shard, accumulation. GPU work is enqueued on the stream and never
// blocks the host; host work runs in the call.
#pragma once

#include <cstddef>

#include "rt_dist/fsdp.h"
#include "rt_dist/types.h"
#include "rt_dist/work.h"

namespace rtd::shard {

struct AdamWShard {
  BufferView param;  // fp32 master shard, updated in place
  BufferView grad;   // fp32 or bf16, param.count elements
  float* m = nullptr;
  float* v = nullptr;
  BufferView out;  // the new parameters in the compute dtype (fp32/bf16); data null: none
  AdamWOptions options;
  int step = 1;             // 1-based, for the bias corrections
  float grad_scale = 1.0f;  // gradients are multiplied by this first (unscale and clip)
};
void adamw_async(const AdamWShard& shard, StreamRef stream);

// *out = sum of g[j]^2 (float32; out in g's memory kind). inf or nan in g makes it non-finite.
void sum_squares_async(const BufferView& g, float* out, StreamRef stream);

// dst += src, same count and dtype (fp32 or bf16, summed in fp32).
void add_into_async(const BufferView& dst, const BufferView& src, StreamRef stream);

// Reads one float that the caller knows to be ready (host or device memory).
float read_float(const float* p, DeviceType device);

namespace gpu {  // sharding/shard_ops_gpu.cu, or a stub without CUDA
void adamw_async(const AdamWShard& shard, StreamRef stream);
void sum_squares_async(const BufferView& g, float* out, StreamRef stream);
void add_into_async(const BufferView& dst, const BufferView& src, StreamRef stream);
float read_float(const float* p);
}  // namespace gpu

}  // namespace rtd::shard
