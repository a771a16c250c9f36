// GPU halves of the sharded strategies' element-wise work (shard_ops.h).
// Shards are multiples of 64 elements on 256-byte boundaries (shard_layout.h),
// but nothing here relies on it: every kernel is grid-stride over elements.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <string>
#include <type_traits>

#include "rt_dist/error.h"
#include "sharding/shard_ops.h"

namespace rtd::shard::gpu {
namespace {

constexpr int kThreads = 256;

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    throw Error(ErrorCategory::kBackend,
                std::string(what) + ": CUDA error " + cudaGetErrorString(rc), rc);
  }
}
unsigned grid(std::size_t n) {
  std::size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b == 0 ? 1 : (b < 8192 ? b : 8192));
}
cudaStream_t raw(StreamRef s) { return static_cast<cudaStream_t>(s.cuda_stream); }

__device__ float load(const float* p, std::size_t i) { return p[i]; }
__device__ float load(const __nv_bfloat16* p, std::size_t i) { return __bfloat162float(p[i]); }
__device__ float load(const __half* p, std::size_t i) { return __half2float(p[i]); }
__device__ void store(float* p, std::size_t i, float v) { p[i] = v; }
__device__ void store(__nv_bfloat16* p, std::size_t i, float v) { p[i] = __float2bfloat16_rn(v); }
__device__ void store(__half* p, std::size_t i, float v) { p[i] = __float2half_rn(v); }

// fn(typed pointer) for a float32, bfloat16 or float16 buffer.
template <typename Fn>
void typed(const BufferView& b, Fn&& fn) {
  if (b.dtype == DType::kBFloat16)
    fn(static_cast<__nv_bfloat16*>(b.data));
  else if (b.dtype == DType::kFloat16)
    fn(static_cast<__half*>(b.data));
  else
    fn(static_cast<float*>(b.data));
}
struct NoOut {};
__device__ void store(NoOut*, std::size_t, float) {}

template <typename G, typename O>
__global__ void k_adamw(float* p, const G* g, float* m, float* v, O* out, std::size_t n,
                        AdamWOptions o, float bc1, float bc2, float scale) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float gi = load(g, i) * scale;
    const float mi = o.beta1 * m[i] + (1.0f - o.beta1) * gi;
    const float vi = o.beta2 * v[i] + (1.0f - o.beta2) * gi * gi;
    float pi = p[i] * (1.0f - o.lr * o.weight_decay);
    pi -= o.lr * (mi / bc1) / (sqrtf(vi / bc2) + o.eps);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
    store(out, i, pi);
  }
}

template <typename G, typename O>
void launch_adamw(const AdamWShard& s, const G* g, O* out, cudaStream_t stream) {
  const float bc1 = 1.0f - powf(s.options.beta1, static_cast<float>(s.step));
  const float bc2 = 1.0f - powf(s.options.beta2, static_cast<float>(s.step));
  const std::size_t n = s.param.count;
  k_adamw<<<grid(n), kThreads, 0, stream>>>(static_cast<float*>(s.param.data), g, s.m, s.v, out, n,
                                            s.options, bc1, bc2, s.grad_scale);
}

template <typename G>
void adamw_to(const AdamWShard& s, const G* g, cudaStream_t stream) {
  if (s.out.data == nullptr)
    launch_adamw(s, g, static_cast<NoOut*>(nullptr), stream);
  else
    typed(s.out, [&](auto* out) { launch_adamw(s, g, out, stream); });
}

template <typename T>
__global__ void k_sum_squares(const T* g, std::size_t n, float* out) {
  __shared__ float partial[kThreads / 32];
  float acc = 0.0f;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float x = load(g, i);
    acc += x * x;
  }
  for (int o = 16; o > 0; o /= 2) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) sum += partial[w];
    atomicAdd(out, sum);
  }
}

template <typename T>
__global__ void k_add_into(T* dst, const T* src, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    store(dst, i, load(dst, i) + load(src, i));
  }
}

}  // namespace

void adamw_async(const AdamWShard& s, StreamRef stream) {
  if (s.param.count == 0) return;
  typed(s.grad, [&](const auto* g) { adamw_to(s, g, raw(stream)); });
  check(cudaGetLastError(), "launching the AdamW step");
}

void sum_squares_async(const BufferView& g, float* out, StreamRef stream) {
  check(cudaMemsetAsync(out, 0, sizeof(float), raw(stream)), "zeroing the sum of squares");
  if (g.count == 0) return;
  const unsigned blocks = grid(g.count) < 1024 ? grid(g.count) : 1024;
  typed(g, [&](const auto* p) {
    k_sum_squares<<<blocks, kThreads, 0, raw(stream)>>>(p, g.count, out);
  });
  check(cudaGetLastError(), "launching the sum of squares");
}

void add_into_async(const BufferView& dst, const BufferView& src, StreamRef stream) {
  if (dst.count == 0) return;
  typed(dst, [&](auto* d) {
    using T = std::remove_pointer_t<decltype(d)>;
    k_add_into<<<grid(dst.count), kThreads, 0, raw(stream)>>>(d, static_cast<const T*>(src.data),
                                                              dst.count);
  });
  check(cudaGetLastError(), "launching the gradient accumulation");
}

float read_float(const float* p) {
  float value = 0.0f;
  // The caller waited for the work that wrote it; a plain copy suffices.
  check(cudaMemcpy(&value, p, sizeof(float), cudaMemcpyDeviceToHost), "reading a scalar back");
  return value;
}

}  // namespace rtd::shard::gpu
