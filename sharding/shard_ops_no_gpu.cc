// Built without CUDA: GPU buffers cannot exist, so every GPU operation says so.
#include "rt_dist/error.h"
#include "sharding/shard_ops.h"

namespace rtd::shard::gpu {
namespace {
[[noreturn]] void no_gpu() {
  throw Error(ErrorCategory::kConfig,
              "librt_dist was built without CUDA; GPU buffers are not supported");
}
}  // namespace
void adamw_async(const AdamWShard&, StreamRef) { no_gpu(); }
void sum_squares_async(const BufferView&, float*, StreamRef) { no_gpu(); }
void add_into_async(const BufferView&, const BufferView&, StreamRef) { no_gpu(); }
float read_float(const float*) { no_gpu(); }
}  // namespace rtd::shard::gpu
