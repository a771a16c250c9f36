// 16-bit (bfloat16 or float16) matrix products through cuBLASLt with fp32
// accumulation, in the three shapes a Linear layer needs; row-major matrices
// as PyTorch lays them out. Operands are raw pointers to elements of type().
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
  // CUDA_R_16BF (the default) or CUDA_R_16F: the inputs, and the 16-bit outputs.
  void set_type(cudaDataType_t type) { type_ = type; }
  cudaDataType_t type() const { return type_; }

  // y[b, out] = x[b, in] * w[out, in]^T            (forward)
  void forward(const void* x, const void* w, void* y, int b, int in, int out, cudaStream_t s);
  // dx[b, in] = dy[b, out] * w[out, in]            (input gradient)
  void grad_input(const void* dy, const void* w, void* dx, int b, int in, int out, cudaStream_t s);
  // dw[out, in] = dy[b, out]^T * x[b, in]          (weight gradient, into DDP's bucket)
  // accumulated in fp32 and written as fp32 (dw_is_16bit false) or rounded
  // once to type().
  void grad_weight(const void* dy, const void* x, void* dw, bool dw_is_16bit, int b, int in,
                   int out, cudaStream_t s);

 private:
  // C (m x n, column-major) = op(A) op(B), A and B bf16, C of c_type.
  void run(bool trans_a, bool trans_b, int m, int n, int k, const void* a, int lda, const void* b,
           int ldb, void* c, int ldc, cudaDataType_t c_type, cudaStream_t s);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_;
  int sm_target_ = 0;
  cudaDataType_t type_ = CUDA_R_16BF;
  std::map<std::tuple<bool, bool, int, int, int, int, int>, cublasLtMatmulAlgo_t> algos_;
};

}  // namespace mlp
