// The one kernel of the copy-engine all-reduce and reduce-scatter (nccl/device_ops.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "rt_dist/types.h"

namespace rtd::nccl {

// dst[j] = scale * (src[j] + sum over s < slots of scratch[s * slot_elems + j]) for
// j < n, float32, bfloat16 or float16 (summed in float32); src may be dst; enqueued on
// stream. blocks > 0 caps the grid (fewer blocks leave more SMs to kernels
// running beside it).
void reduce_slots_async(void* dst, const void* src, const void* scratch, std::size_t slot_elems,
                        int slots, std::size_t n, DType dtype, float scale, int blocks,
                        cudaStream_t stream);

}  // namespace rtd::nccl
