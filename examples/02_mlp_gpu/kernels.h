// The element-wise CUDA kernels of the GPU MLP: initialization, GELU forward
// and backward (erf form, as torch.nn.GELU), the loss mean((y - gelu(x))^2)
// of reproducing the input's GELU through the layers, and its gradient, and
// a fused AdamW step that also refreshes the 16-bit weights.
// T, the products' element type: __nv_bfloat16 or __half. Sizes: n even for
// GELU and the loss, a multiple of 4 for AdamW (H*H and B*H are, for the
// shapes the trainer accepts; main.cc checks).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace mlp {

void init_uniform(float* out, std::size_t n, float scale, unsigned seed, cudaStream_t s);
template <typename T>
void init_uniform_16(T* out, std::size_t n, float scale, unsigned seed, cudaStream_t s);
template <typename T>
void to_16(const float* in, T* out, std::size_t n, cudaStream_t s);
// out = gelu(in)
template <typename T>
void gelu_forward(const T* in, T* out, std::size_t n, cudaStream_t s);
// grad_in = gelu'(pre) * grad_out
template <typename T>
void gelu_backward(const T* pre, const T* grad_out, T* grad_in, std::size_t n, cudaStream_t s);
// The task: the output y of the last layer learns gelu(x) of the input x.
// loss_sum += sum((y - gelu(x))^2) (one float on the device); dy =
// loss_scale * 2 (y - gelu(x)) / n (float16 needs the scale: 2 d / n
// underflows it for the reference shapes).
template <typename T>
void loss_and_grad(const T* y, const T* x, T* dy, float* loss_sum, std::size_t n, float loss_scale,
                   cudaStream_t s);

struct AdamW {
  float lr = 1e-4f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.01f;
};
// One fused step over n parameters: p, m, v in fp32; g the gradient (fp32 or
// T, read as it is and multiplied by grad_scale); w the 16-bit copy.
template <typename G, typename T>
void adamw_step(float* p, const G* g, float* m, float* v, T* w, std::size_t n, const AdamW& opt,
                int step, float grad_scale, cudaStream_t s);

}  // namespace mlp
