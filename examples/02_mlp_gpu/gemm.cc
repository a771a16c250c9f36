// cuBLASLt calls: one descriptor set per product, the heuristic's first choice cached per shape.
#include "examples/02_mlp_gpu/gemm.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace mlp {
namespace {

void check(cublasStatus_t rc, const char* what) {
  if (rc != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": cuBLASLt status " + std::to_string(rc));
}

}  // namespace

Gemm::Gemm(std::size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  check(cublasLtCreate(&handle_), "cublasLtCreate");
  if (cudaMalloc(&workspace_, workspace_bytes_) != cudaSuccess)
    throw std::runtime_error("workspace");
}

Gemm::~Gemm() {
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

void Gemm::run(bool trans_a, bool trans_b, int m, int n, int k, const void* a, int lda,
               const void* b, int ldb, void* c, int ldc, cudaDataType_t c_type, cudaStream_t s) {
  cublasLtMatmulDesc_t desc;
  check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
  cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                    tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  if (sm_target_ > 0) {
    int32_t sms = sm_target_;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sms, sizeof(sms));
  }
  cublasLtMatrixLayout_t la, lb, lc;
  check(cublasLtMatrixLayoutCreate(&la, type_, trans_a ? k : m, trans_a ? m : k, lda), "layout a");
  check(cublasLtMatrixLayoutCreate(&lb, type_, trans_b ? n : k, trans_b ? k : n, ldb), "layout b");
  check(cublasLtMatrixLayoutCreate(&lc, c_type, m, n, ldc), "layout c");
  auto key =
      std::make_tuple(trans_a, trans_b, m, n, k, static_cast<int>(c_type) * 64 + type_, sm_target_);
  auto it = algos_.find(key);
  if (it == algos_.end()) {
    cublasLtMatmulPreference_t pref;
    check(cublasLtMatmulPreferenceCreate(&pref), "pref");
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                         &workspace_bytes_, sizeof(workspace_bytes_));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    check(cublasLtMatmulAlgoGetHeuristic(handle_, desc, la, lb, lc, lc, pref, 1, &result, &found),
          "heuristic");
    cublasLtMatmulPreferenceDestroy(pref);
    if (found == 0) throw std::runtime_error("cuBLASLt found no algorithm");
    it = algos_.emplace(key, result.algo).first;
  }
  const float alpha = 1.0f, beta = 0.0f;
  check(cublasLtMatmul(handle_, desc, &alpha, a, la, b, lb, &beta, c, lc, c, lc, &it->second,
                       workspace_, workspace_bytes_, s),
        "cublasLtMatmul");
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
}

// Row-major R (r x c) is column-major R^T (c x r) with leading dimension c.
void Gemm::forward(const void* x, const void* w, void* y, int b, int in, int out, cudaStream_t s) {
  // y^T (out x b) = w (out x in) * x^T (in x b); w's buffer is w^T column-major.
  run(true, false, out, b, in, w, in, x, in, y, out, type_, s);
}

void Gemm::grad_input(const void* dy, const void* w, void* dx, int b, int in, int out,
                      cudaStream_t s) {
  // dx^T (in x b) = w^T (in x out) * dy^T (out x b)
  run(false, false, in, b, out, w, in, dy, out, dx, in, type_, s);
}

void Gemm::grad_weight(const void* dy, const void* x, void* dw, bool dw_is_16bit, int b, int in,
                       int out, cudaStream_t s) {
  // dw^T (in x out) = x^T (in x b) * dy (b x out)
  run(false, true, in, out, b, x, in, dy, out, dw, in, dw_is_16bit ? type_ : CUDA_R_32F, s);
}

}  // namespace mlp
