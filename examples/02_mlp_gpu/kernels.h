// The element-wise CUDA kernels of the GPU MLP: initialization, GELU forward
// and backward (erf form, as torch.nn.GELU), the loss mean(y^2) and its
// gradient, and a fused AdamW step that also refreshes the bf16 weights.
// Sizes: n even for GELU and the loss, a multiple of 4 for AdamW (H*H and
// B*H are, for the shapes the trainer accepts; main.cc checks).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace mlp {

void init_uniform(float* out, std::size_t n, float scale, unsigned seed, cudaStream_t s);
void init_uniform_bf16(__nv_bfloat16* out, std::size_t n, float scale, unsigned seed,
                       cudaStream_t s);
void to_bf16(const float* in, __nv_bfloat16* out, std::size_t n, cudaStream_t s);
// out = gelu(in)
void gelu_forward(const __nv_bfloat16* in, __nv_bfloat16* out, std::size_t n, cudaStream_t s);
// grad_in = gelu'(pre) * grad_out
void gelu_backward(const __nv_bfloat16* pre, const __nv_bfloat16* grad_out, __nv_bfloat16* grad_in,
                   std::size_t n, cudaStream_t s);
// loss_sum += sum(y^2) (one float on the device); dy = 2 y / n
void loss_and_grad(const __nv_bfloat16* y, __nv_bfloat16* dy, float* loss_sum, std::size_t n,
                   cudaStream_t s);

struct AdamW {
  float lr = 1e-4f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.01f;
};
// One fused step over n parameters: p, m, v in fp32; g the gradient (fp32 or
// bf16, read as it is); w the bf16 copy.
void adamw_step(float* p, const float* g, float* m, float* v, __nv_bfloat16* w, std::size_t n,
                const AdamW& opt, int step, cudaStream_t s);
void adamw_step(float* p, const __nv_bfloat16* g, float* m, float* v, __nv_bfloat16* w,
                std::size_t n, const AdamW& opt, int step, cudaStream_t s);

}  // namespace mlp
