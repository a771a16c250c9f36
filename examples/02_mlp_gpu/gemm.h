// bf16 matrix products through cuBLASLt with fp32 accumulation, in the three
// shapes a Linear layer needs; row-major matrices as PyTorch lays them out.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>

#include <cstddef>
#include <map>
#include <tuple>

namespace mlp {

class Gemm {
 public:
  explicit Gemm(std::size_t workspace_bytes = 32u << 20);
  ~Gemm();
  std::size_t workspace_bytes() const { return workspace_bytes_; }
  // Products after this call are planned for this many SMs (cuBLASLt's SM count
  // target), leaving the rest to kernels running beside them; 0: all SMs.
  void set_sm_count_target(int sms) { sm_target_ = sms; }

  // y[b, out] = x[b, in] * w[out, in]^T            (forward)
  void forward(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int b, int in,
               int out, cudaStream_t s);
  // dx[b, in] = dy[b, out] * w[out, in]            (input gradient)
  void grad_input(const __nv_bfloat16* dy, const __nv_bfloat16* w, __nv_bfloat16* dx, int b, int in,
                  int out, cudaStream_t s);
  // dw[out, in] = dy[b, out]^T * x[b, in]          (weight gradient, into DDP's bucket)
  // accumulated in fp32 and written as fp32, or rounded once to bf16.
  void grad_weight(const __nv_bfloat16* dy, const __nv_bfloat16* x, float* dw, int b, int in,
                   int out, cudaStream_t s);
  void grad_weight(const __nv_bfloat16* dy, const __nv_bfloat16* x, __nv_bfloat16* dw, int b,
                   int in, int out, cudaStream_t s);

 private:
  // C (m x n, column-major) = op(A) op(B), A and B bf16, C of c_type.
  void run(bool trans_a, bool trans_b, int m, int n, int k, const void* a, int lda, const void* b,
           int ldb, void* c, int ldc, cudaDataType_t c_type, cudaStream_t s);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_;
  int sm_target_ = 0;
  std::map<std::tuple<bool, bool, int, int, int, int, int>, cublasLtMatmulAlgo_t> algos_;
};

}  // namespace mlp
