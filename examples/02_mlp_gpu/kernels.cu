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

#define GRID_STRIDE(i, n)                                              \
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += std::size_t(gridDim.x) * blockDim.x)

__global__ void k_init(float* out, std::size_t n, float scale, unsigned seed) {
  GRID_STRIDE(i, n) out[i] = scale * hash_uniform(seed, i);
}
__global__ void k_init_bf16(__nv_bfloat16* out, std::size_t n, float scale, unsigned seed) {
  GRID_STRIDE(i, n) out[i] = __float2bfloat16(scale * hash_uniform(seed, i));
}
__global__ void k_to_bf16(const float* in, __nv_bfloat16* out, std::size_t n) {
  GRID_STRIDE(i, n) out[i] = __float2bfloat16(in[i]);
}
// Two bf16 elements per thread (n is even for every shape used here).
__global__ void k_gelu(const __nv_bfloat162* in, __nv_bfloat162* out, std::size_t n2) {
  GRID_STRIDE(i, n2) {
    float2 v = __bfloat1622float2(in[i]);
    out[i] = __floats2bfloat162_rn(gelu(v.x), gelu(v.y));
  }
}
__global__ void k_gelu_back(const __nv_bfloat162* pre, const __nv_bfloat162* go, __nv_bfloat162* gi,
                            std::size_t n2) {
  GRID_STRIDE(i, n2) {
    float2 p = __bfloat1622float2(pre[i]);
    float2 g = __bfloat1622float2(go[i]);
    gi[i] = __floats2bfloat162_rn(gelu_grad(p.x) * g.x, gelu_grad(p.y) * g.y);
  }
}
// One atomic per block (a few hundred in all): atomics on one address from
// every warp of a 67M-element pass serialize in L2.
__global__ void k_loss(const __nv_bfloat162* y, __nv_bfloat162* dy, float* loss, std::size_t n2,
                       float scale) {
  __shared__ float warp_sums[kThreads / 32];
  float local = 0.0f;
  GRID_STRIDE(i, n2) {
    float2 v = __bfloat1622float2(y[i]);
    local += v.x * v.x + v.y * v.y;
    dy[i] = __floats2bfloat162_rn(scale * v.x, scale * v.y);
  }
  for (int off = 16; off > 0; off >>= 1) local += __shfl_down_sync(0xffffffffu, local, off);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x / 32] = local;
  __syncthreads();
  if (threadIdx.x < 32) {
    float sum = threadIdx.x < kThreads / 32 ? warp_sums[threadIdx.x] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, off);
    if (threadIdx.x == 0) atomicAdd(loss, sum);
  }
}
__device__ float adamw_one(float p, float g, float& m, float& v, const AdamW& o, float bc1,
                           float bc2) {
  m = o.beta1 * m + (1.0f - o.beta1) * g;
  v = o.beta2 * v + (1.0f - o.beta2) * g * g;
  p *= 1.0f - o.lr * o.weight_decay;
  return p - o.lr * (m / bc1) / (sqrtf(v / bc2) + o.eps);
}
// Four gradient elements as floats: one 16-byte load of fp32, one 8-byte load of bf16.
__device__ float4 load4(const float4* g, std::size_t i) { return g[i]; }
__device__ float4 load4(const uint2* g, std::size_t i) {
  uint2 bits = g[i];
  float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits.x));
  float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}
// Four elements per thread with 16-byte loads (n % 4 == 0, buffers 16-byte aligned).
template <typename Grad4>
__global__ void k_adamw(float4* p, const Grad4* g, float4* m, float4* v, __nv_bfloat162* w,
                        std::size_t n4, AdamW o, float bc1, float bc2) {
  GRID_STRIDE(i, n4) {
    float4 pi = p[i], gi = load4(g, i), mi = m[i], vi = v[i];
    pi.x = adamw_one(pi.x, gi.x, mi.x, vi.x, o, bc1, bc2);
    pi.y = adamw_one(pi.y, gi.y, mi.y, vi.y, o, bc1, bc2);
    pi.z = adamw_one(pi.z, gi.z, mi.z, vi.z, o, bc1, bc2);
    pi.w = adamw_one(pi.w, gi.w, mi.w, vi.w, o, bc1, bc2);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    w[2 * i] = __floats2bfloat162_rn(pi.x, pi.y);
    w[2 * i + 1] = __floats2bfloat162_rn(pi.z, pi.w);
  }
}

}  // namespace

void init_uniform(float* out, std::size_t n, float scale, unsigned seed, cudaStream_t s) {
  k_init<<<blocks(n), kThreads, 0, s>>>(out, n, scale, seed);
}
void init_uniform_bf16(__nv_bfloat16* out, std::size_t n, float scale, unsigned seed,
                       cudaStream_t s) {
  k_init_bf16<<<blocks(n), kThreads, 0, s>>>(out, n, scale, seed);
}
void to_bf16(const float* in, __nv_bfloat16* out, std::size_t n, cudaStream_t s) {
  k_to_bf16<<<blocks(n), kThreads, 0, s>>>(in, out, n);
}
void gelu_forward(const __nv_bfloat16* in, __nv_bfloat16* out, std::size_t n, cudaStream_t s) {
  k_gelu<<<blocks(n / 2), kThreads, 0, s>>>(reinterpret_cast<const __nv_bfloat162*>(in),
                                            reinterpret_cast<__nv_bfloat162*>(out), n / 2);
}
void gelu_backward(const __nv_bfloat16* pre, const __nv_bfloat16* go, __nv_bfloat16* gi,
                   std::size_t n, cudaStream_t s) {
  k_gelu_back<<<blocks(n / 2), kThreads, 0, s>>>(reinterpret_cast<const __nv_bfloat162*>(pre),
                                                 reinterpret_cast<const __nv_bfloat162*>(go),
                                                 reinterpret_cast<__nv_bfloat162*>(gi), n / 2);
}
void loss_and_grad(const __nv_bfloat16* y, __nv_bfloat16* dy, float* loss_sum, std::size_t n,
                   cudaStream_t s) {
  unsigned grid = blocks(n / 2) < 1056 ? blocks(n / 2) : 1056;  // 8 blocks per SM of 132
  k_loss<<<grid, kThreads, 0, s>>>(reinterpret_cast<const __nv_bfloat162*>(y),
                                   reinterpret_cast<__nv_bfloat162*>(dy), loss_sum, n / 2,
                                   2.0f / static_cast<float>(n));
}
namespace {
template <typename Grad4>
void launch_adamw(float* p, const Grad4* g, float* m, float* v, __nv_bfloat16* w, std::size_t n,
                  const AdamW& opt, int step, cudaStream_t s) {
  float bc1 = 1.0f - powf(opt.beta1, static_cast<float>(step));
  float bc2 = 1.0f - powf(opt.beta2, static_cast<float>(step));
  k_adamw<<<blocks(n / 4), kThreads, 0, s>>>(
      reinterpret_cast<float4*>(p), g, reinterpret_cast<float4*>(m), reinterpret_cast<float4*>(v),
      reinterpret_cast<__nv_bfloat162*>(w), n / 4, opt, bc1, bc2);
}
}  // namespace

void adamw_step(float* p, const float* g, float* m, float* v, __nv_bfloat16* w, std::size_t n,
                const AdamW& opt, int step, cudaStream_t s) {
  launch_adamw(p, reinterpret_cast<const float4*>(g), m, v, w, n, opt, step, s);
}
void adamw_step(float* p, const __nv_bfloat16* g, float* m, float* v, __nv_bfloat16* w,
                std::size_t n, const AdamW& opt, int step, cudaStream_t s) {
  launch_adamw(p, reinterpret_cast<const uint2*>(g), m, v, w, n, opt, step, s);
}

}  // namespace mlp
