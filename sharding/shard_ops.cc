// Host halves of the sharded strategies' element-wise work (shard_ops.h); GPU
// buffers go to shard_ops_gpu.cu.
#include "sharding/shard_ops.h"

#include <cmath>
#include <cstdint>

#include "rt_dist/error.h"
#include "sharding/cpu_adamw.h"
#include "sharding/host_values.h"

namespace rtd::shard {
namespace {

void check_float(const BufferView& b, const char* what) {
  if (!is_float_type(b.dtype)) {
    throw Error(ErrorCategory::kInvalidArgument, std::string(what) +
                                                     ": float32, bfloat16 or float16 only, not " +
                                                     std::string(to_string(b.dtype)));
  }
}

}  // namespace

void adamw_async(const AdamWShard& s, StreamRef stream) {
  check_float(s.grad, "AdamW gradient");
  if (s.param.device == DeviceType::kCuda) return gpu::adamw_async(s, stream);
  cpu::adamw(s, 1);  // vectorized where the CPU can (cpu_adamw.h)
}

void sum_squares_async(const BufferView& g, float* out, StreamRef stream) {
  check_float(g, "sum of squares");
  if (g.device == DeviceType::kCuda) return gpu::sum_squares_async(g, out, stream);
  double sum = 0.0;
  for (std::size_t j = 0; j < g.count; ++j) {
    const double x = load_value(g, j);
    sum += x * x;
  }
  *out = static_cast<float>(sum);
}

void add_into_async(const BufferView& dst, const BufferView& src, StreamRef stream) {
  check_float(dst, "accumulation");
  if (dst.dtype != src.dtype || dst.count != src.count) {
    throw Error(ErrorCategory::kInternal, "accumulation: buffers of different dtype or count");
  }
  if (dst.device == DeviceType::kCuda) return gpu::add_into_async(dst, src, stream);
  for (std::size_t j = 0; j < dst.count; ++j)
    store_value(dst, j, load_value(dst, j) + load_value(src, j));
}

float read_float(const float* p, DeviceType device) {
  return device == DeviceType::kCuda ? gpu::read_float(p) : *p;
}

}  // namespace rtd::shard
