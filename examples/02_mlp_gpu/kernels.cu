// Element-wise kernels of the GPU MLP (grid-stride loops, 256 threads a block),
// for bfloat16 and float16 products alike through Pair<T>.
#include "examples/02_mlp_gpu/kernels.h"

namespace mlp {
namespace {

constexpr int kThreads = 256;

unsigned blocks(std::size_t n) {
  std::size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b > 65535 * 8 ? 65535 * 8 : (b == 0 ? 1 : b));
}

// T's two-element vector type and its conversions.
template <typename T>
struct Pair;
template <>
struct Pair<__nv_bfloat16> {
  using T2 = __nv_bfloat162;
  static __device__ float2 widen(T2 v) { return __bfloat1622float2(v); }
  static __device__ T2 narrow(float a, float b) { return __floats2bfloat162_rn(a, b); }
  static __device__ __nv_bfloat16 one(float x) { return __float2bfloat16(x); }
};
template <>
struct Pair<__half> {
  using T2 = __half2;
  static __device__ float2 widen(T2 v) { return __half22float2(v); }
  static __device__ T2 narrow(float a, float b) { return __floats2half2_rn(a, b); }
  static __device__ __half one(float x) { return __float2half(x); }
};

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
template <typename T>
__global__ void k_init_16(T* out, std::size_t n, float scale, unsigned seed) {
  GRID_STRIDE(i, n) out[i] = Pair<T>::one(scale * hash_uniform(seed, i));
}
template <typename T>
__global__ void k_to_16(const float* in, T* out, std::size_t n) {
  GRID_STRIDE(i, n) out[i] = Pair<T>::one(in[i]);
}
// Two elements per thread (n is even for every shape used here).
template <typename T, typename T2 = typename Pair<T>::T2>
__global__ void k_gelu(const T2* in, T2* out, std::size_t n2) {
  GRID_STRIDE(i, n2) {
    float2 v = Pair<T>::widen(in[i]);
    out[i] = Pair<T>::narrow(gelu(v.x), gelu(v.y));
  }
}
template <typename T, typename T2 = typename Pair<T>::T2>
__global__ void k_gelu_back(const T2* pre, const T2* go, T2* gi, std::size_t n2) {
  GRID_STRIDE(i, n2) {
    float2 p = Pair<T>::widen(pre[i]);
    float2 g = Pair<T>::widen(go[i]);
    gi[i] = Pair<T>::narrow(gelu_grad(p.x) * g.x, gelu_grad(p.y) * g.y);
  }
}
// One atomic per block (a few hundred in all): atomics on one address from
// every warp of a 67M-element pass serialize in L2.
template <typename T, typename T2 = typename Pair<T>::T2>
__global__ void k_loss(const T2* y, const T2* x, T2* dy, float* loss, std::size_t n2, float scale) {
  __shared__ float warp_sums[kThreads / 32];
  float local = 0.0f;
  GRID_STRIDE(i, n2) {
    float2 v = Pair<T>::widen(y[i]);
    float2 t = Pair<T>::widen(x[i]);
    float dx = v.x - gelu(t.x), dyy = v.y - gelu(t.y);
    local += dx * dx + dyy * dyy;
    dy[i] = Pair<T>::narrow(scale * dx, scale * dyy);
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
// Four gradient elements as floats: one 16-byte load of fp32, one 8-byte load of 16-bit.
template <typename G>
struct Grad4 {
  using V = uint2;
  static __device__ float4 load(const V* g, std::size_t i) {
    uint2 bits = g[i];
    float2 lo = Pair<G>::widen(*reinterpret_cast<const typename Pair<G>::T2*>(&bits.x));
    float2 hi = Pair<G>::widen(*reinterpret_cast<const typename Pair<G>::T2*>(&bits.y));
    return make_float4(lo.x, lo.y, hi.x, hi.y);
  }
};
template <>
struct Grad4<float> {
  using V = float4;
  static __device__ float4 load(const V* g, std::size_t i) { return g[i]; }
};
// Four elements per thread with 16-byte loads (n % 4 == 0, buffers 16-byte aligned).
template <typename G, typename T, typename T2 = typename Pair<T>::T2>
__global__ void k_adamw(float4* p, const typename Grad4<G>::V* g, float4* m, float4* v, T2* w,
                        std::size_t n4, AdamW o, float bc1, float bc2, float grad_scale) {
  GRID_STRIDE(i, n4) {
    float4 pi = p[i], gi = Grad4<G>::load(g, i), mi = m[i], vi = v[i];
    pi.x = adamw_one(pi.x, gi.x * grad_scale, mi.x, vi.x, o, bc1, bc2);
    pi.y = adamw_one(pi.y, gi.y * grad_scale, mi.y, vi.y, o, bc1, bc2);
    pi.z = adamw_one(pi.z, gi.z * grad_scale, mi.z, vi.z, o, bc1, bc2);
    pi.w = adamw_one(pi.w, gi.w * grad_scale, mi.w, vi.w, o, bc1, bc2);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    w[2 * i] = Pair<T>::narrow(pi.x, pi.y);
    w[2 * i + 1] = Pair<T>::narrow(pi.z, pi.w);
  }
}

}  // namespace

void init_uniform(float* out, std::size_t n, float scale, unsigned seed, cudaStream_t s) {
  k_init<<<blocks(n), kThreads, 0, s>>>(out, n, scale, seed);
}
template <typename T>
void init_uniform_16(T* out, std::size_t n, float scale, unsigned seed, cudaStream_t s) {
  k_init_16<<<blocks(n), kThreads, 0, s>>>(out, n, scale, seed);
}
template <typename T>
void to_16(const float* in, T* out, std::size_t n, cudaStream_t s) {
  k_to_16<<<blocks(n), kThreads, 0, s>>>(in, out, n);
}
template <typename T>
void gelu_forward(const T* in, T* out, std::size_t n, cudaStream_t s) {
  using T2 = typename Pair<T>::T2;
  k_gelu<T><<<blocks(n / 2), kThreads, 0, s>>>(reinterpret_cast<const T2*>(in),
                                               reinterpret_cast<T2*>(out), n / 2);
}
template <typename T>
void gelu_backward(const T* pre, const T* go, T* gi, std::size_t n, cudaStream_t s) {
  using T2 = typename Pair<T>::T2;
  k_gelu_back<T><<<blocks(n / 2), kThreads, 0, s>>>(reinterpret_cast<const T2*>(pre),
                                                    reinterpret_cast<const T2*>(go),
                                                    reinterpret_cast<T2*>(gi), n / 2);
}
template <typename T>
void loss_and_grad(const T* y, const T* x, T* dy, float* loss_sum, std::size_t n, float loss_scale,
                   cudaStream_t s) {
  using T2 = typename Pair<T>::T2;
  unsigned grid = blocks(n / 2) < 1056 ? blocks(n / 2) : 1056;  // 8 blocks per SM of 132
  k_loss<T><<<grid, kThreads, 0, s>>>(reinterpret_cast<const T2*>(y),
                                      reinterpret_cast<const T2*>(x), reinterpret_cast<T2*>(dy),
                                      loss_sum, n / 2, loss_scale * 2.0f / static_cast<float>(n));
}
template <typename G, typename T>
void adamw_step(float* p, const G* g, float* m, float* v, T* w, std::size_t n, const AdamW& opt,
                int step, float grad_scale, cudaStream_t s) {
  using T2 = typename Pair<T>::T2;
  float bc1 = 1.0f - powf(opt.beta1, static_cast<float>(step));
  float bc2 = 1.0f - powf(opt.beta2, static_cast<float>(step));
  k_adamw<G, T><<<blocks(n / 4), kThreads, 0, s>>>(
      reinterpret_cast<float4*>(p), reinterpret_cast<const typename Grad4<G>::V*>(g),
      reinterpret_cast<float4*>(m), reinterpret_cast<float4*>(v), reinterpret_cast<T2*>(w), n / 4,
      opt, bc1, bc2, grad_scale);
}

#define MLP_INSTANTIATE(T)                                                                        \
  template void init_uniform_16<T>(T*, std::size_t, float, unsigned, cudaStream_t);               \
  template void to_16<T>(const float*, T*, std::size_t, cudaStream_t);                            \
  template void gelu_forward<T>(const T*, T*, std::size_t, cudaStream_t);                         \
  template void gelu_backward<T>(const T*, const T*, T*, std::size_t, cudaStream_t);              \
  template void loss_and_grad<T>(const T*, const T*, T*, float*, std::size_t, float,              \
                                 cudaStream_t);                                                   \
  template void adamw_step<float, T>(float*, const float*, float*, float*, T*, std::size_t,       \
                                     const AdamW&, int, float, cudaStream_t);                     \
  template void adamw_step<T, T>(float*, const T*, float*, float*, T*, std::size_t, const AdamW&, \
                                 int, float, cudaStream_t);
MLP_INSTANTIATE(__nv_bfloat16)
MLP_INSTANTIATE(__half)
#undef MLP_INSTANTIATE

}  // namespace mlp
