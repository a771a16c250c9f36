// Element-wise kernels of the GPU MLP (grid-stride loops, 256 threads a block).
#include "examples/02_mlp_gpu/kernels.h"

namespace mlp {
namespace {

constexpr int kThreads = 256;

unsigned blocks(std::size_t n) {
  std::size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b > 65535 * 8 ? 65535 * 8 : (b == 0 ? 1 : b));
}

__device__ float hash_uniform(unsigned seed, std::size_t i) {
  unsigned long long z = (static_cast<unsigned long long>(seed) << 40) ^ i;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) / 16777216.0f * 2.0f - 1.0f;
}

__device__ float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
__device__ float gelu_grad(float x) {
  float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
  float pdf = 0.39894228040143268f * __expf(-0.5f * x * x);
  return cdf + x * pdf;
}

#define GRID_STRIDE(i, n) \
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += std::size_t(gridDim.x) * blockDim.x)

__global__ void k_init(float* out, std::size_t n, float scale, unsigned seed) {
  GRID_STRIDE(i, n) out[i] = scale * hash_uniform(seed, i);
}
__global__ void k_init_bf16(__nv_bfloat16* out, std::size_t n, float scale, unsigned seed) {
  GRID_STRIDE(i, n) out[i] = __float2bfloat16(scale * hash_uniform(seed, i));
}
__global__ void k_to_bf16(const float* in, __nv_bfloat16* out, std::size_t n) {
  GRID_STRIDE(i, n) out[i] = __float2bfloat16(in[i]);
}
__global__ void k_gelu(const __nv_bfloat16* in, __nv_bfloat16* out, std::size_t n) {
  GRID_STRIDE(i, n) out[i] = __float2bfloat16(gelu(__bfloat162float(in[i])));
}
__global__ void k_gelu_back(const __nv_bfloat16* pre, const __nv_bfloat16* go, __nv_bfloat16* gi,
                            std::size_t n) {
  GRID_STRIDE(i, n) gi[i] = __float2bfloat16(gelu_grad(__bfloat162float(pre[i])) * __bfloat162float(go[i]));
}
__global__ void k_loss(const __nv_bfloat16* y, __nv_bfloat16* dy, float* loss, std::size_t n) {
  float local = 0.0f;
  const float scale = 2.0f / static_cast<float>(n);
  GRID_STRIDE(i, n) {
    float v = __bfloat162float(y[i]);
    local += v * v;
    dy[i] = __float2bfloat16(scale * v);
  }
  for (int off = 16; off > 0; off >>= 1) local += __shfl_down_sync(0xffffffffu, local, off);
  if ((threadIdx.x & 31) == 0) atomicAdd(loss, local);
}
__global__ void k_adamw(float* p, const float* g, float* m, float* v, __nv_bfloat16* w, std::size_t n,
                        AdamW o, float bc1, float bc2) {
  GRID_STRIDE(i, n) {
    float grad = g[i];
    float mi = o.beta1 * m[i] + (1.0f - o.beta1) * grad;
    float vi = o.beta2 * v[i] + (1.0f - o.beta2) * grad * grad;
    m[i] = mi;
    v[i] = vi;
    float pi = p[i] * (1.0f - o.lr * o.weight_decay);
    pi -= o.lr * (mi / bc1) / (sqrtf(vi / bc2) + o.eps);
    p[i] = pi;
    w[i] = __float2bfloat16(pi);
  }
}

}  // namespace

void init_uniform(float* out, std::size_t n, float scale, unsigned seed, cudaStream_t s) {
  k_init<<<blocks(n), kThreads, 0, s>>>(out, n, scale, seed);
}
void init_uniform_bf16(__nv_bfloat16* out, std::size_t n, float scale, unsigned seed, cudaStream_t s) {
  k_init_bf16<<<blocks(n), kThreads, 0, s>>>(out, n, scale, seed);
}
void to_bf16(const float* in, __nv_bfloat16* out, std::size_t n, cudaStream_t s) {
  k_to_bf16<<<blocks(n), kThreads, 0, s>>>(in, out, n);
}
void gelu_forward(const __nv_bfloat16* in, __nv_bfloat16* out, std::size_t n, cudaStream_t s) {
  k_gelu<<<blocks(n), kThreads, 0, s>>>(in, out, n);
}
void gelu_backward(const __nv_bfloat16* pre, const __nv_bfloat16* go, __nv_bfloat16* gi, std::size_t n,
                   cudaStream_t s) {
  k_gelu_back<<<blocks(n), kThreads, 0, s>>>(pre, go, gi, n);
}
void loss_and_grad(const __nv_bfloat16* y, __nv_bfloat16* dy, float* loss_sum, std::size_t n,
                   cudaStream_t s) {
  k_loss<<<blocks(n), kThreads, 0, s>>>(y, dy, loss_sum, n);
}
void adamw_step(float* p, const float* g, float* m, float* v, __nv_bfloat16* w, std::size_t n,
                const AdamW& opt, int step, cudaStream_t s) {
  float bc1 = 1.0f - powf(opt.beta1, static_cast<float>(step));
  float bc2 = 1.0f - powf(opt.beta2, static_cast<float>(step));
  k_adamw<<<blocks(n), kThreads, 0, s>>>(p, g, m, v, w, n, opt, bc1, bc2);
}

}  // namespace mlp
