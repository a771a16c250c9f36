// Model: buffers, forward, backward with per-layer gradient hand-off, AdamW.
#include "examples/02_mlp_gpu/model.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace mlp {

template <typename T>
T* Model::alloc(std::size_t n) {
  void* p = nullptr;
  if (cudaMalloc(&p, n * sizeof(T)) != cudaSuccess) {
    throw std::runtime_error("cudaMalloc of " + std::to_string(n * sizeof(T)) + " bytes failed");
  }
  allocations_.push_back(p);
  bytes_ += n * sizeof(T);
  return static_cast<T*>(p);
}

Model::Model(const MlpConfig& config, cudaStream_t s) : c_(config) {
  if (c_.hidden % 4 != 0 || c_.batch % 2 != 0 || c_.layers < 1) {
    throw std::runtime_error("the MLP needs hidden % 4 == 0, an even batch and at least one layer");
  }
  const std::size_t w = layer_elems() * c_.layers;
  const std::size_t act = std::size_t(c_.batch) * c_.hidden;
  bytes_ += gemm_.workspace_bytes();
  if (!c_.external_weights) {
    master_ = alloc<float>(w);
    m_ = alloc<float>(w);
    v_ = alloc<float>(w);
    weights_ = alloc<__nv_bfloat16>(w);
  }
  for (int l = 0; l <= c_.layers; ++l) acts_.push_back(alloc<__nv_bfloat16>(act));
  for (int l = 0; l < c_.layers; ++l) pre_.push_back(alloc<__nv_bfloat16>(act));
  grad_a_ = alloc<__nv_bfloat16>(act);
  grad_b_ = alloc<__nv_bfloat16>(act);
  loss_ = alloc<float>(1);
  if (!c_.external_weights) {
    init_master(master_, s);
    to_bf16(master_, weights_, w, s);
    cudaMemsetAsync(m_, 0, w * sizeof(float), s);
    cudaMemsetAsync(v_, 0, w * sizeof(float), s);
  }
  cudaMemsetAsync(loss_, 0, sizeof(float), s);
  init_uniform_bf16(acts_[0], act, 1.7320508f, 11, s);
}

void Model::init_master(float* out, cudaStream_t s) const {
  // torch.nn.Linear's default: uniform in +-1/sqrt(fan_in); the input: uniform of variance 1.
  init_uniform(out, layer_elems() * c_.layers, 1.0f / std::sqrt(static_cast<float>(c_.hidden)), 7,
               s);
}

Model::~Model() {
  for (void* p : allocations_) cudaFree(p);
}

void Model::refresh_weights(cudaStream_t s) {
  to_bf16(master_, weights_, layer_elems() * c_.layers, s);
}

void Model::forward(cudaStream_t s, const LayerHooks* hooks) {
  const std::size_t act = std::size_t(c_.batch) * c_.hidden;
  for (int l = 0; l < c_.layers; ++l) {
    if (hooks && hooks->before_forward) hooks->before_forward(l);
    gemm_.forward(acts_[l], weight(l, hooks), pre_[l], c_.batch, c_.hidden, c_.hidden, s);
    if (hooks && hooks->after_forward) hooks->after_forward(l);
    gelu_forward(pre_[l], acts_[l + 1], act, s);
  }
  loss_and_grad(acts_[c_.layers], grad_a_, loss_, act, s);
}

void Model::backward(const std::function<void*(int)>& grad, const std::function<void(int)>& ready,
                     cudaStream_t s, const LayerHooks* hooks) {
  const std::size_t act = std::size_t(c_.batch) * c_.hidden;
  __nv_bfloat16* upstream = grad_a_;  // d loss / d acts_[l + 1]
  __nv_bfloat16* scratch = grad_b_;
  gemm_.set_sm_count_target(backward_sms_);
  for (int l = c_.layers - 1; l >= 0; --l) {
    if (hooks && hooks->before_backward) hooks->before_backward(l);
    // Read before ready(l): a sharding engine may release the layer's weights
    // then (the product below is already ordered before any reuse of them).
    const __nv_bfloat16* w = weight(l, hooks);
    gelu_backward(pre_[l], upstream, scratch, act, s);  // d loss / d pre_[l]
    if (c_.bf16_grads) {
      gemm_.grad_weight(scratch, acts_[l], static_cast<__nv_bfloat16*>(grad(l)), c_.batch,
                        c_.hidden, c_.hidden, s);
    } else {
      gemm_.grad_weight(scratch, acts_[l], static_cast<float*>(grad(l)), c_.batch, c_.hidden,
                        c_.hidden, s);
    }
    ready(l);
    if (l > 0) gemm_.grad_input(scratch, w, upstream, c_.batch, c_.hidden, c_.hidden, s);
  }
  gemm_.set_sm_count_target(0);
}

void Model::optimizer_step(const std::function<const void*(int)>& grad, int step, cudaStream_t s) {
  for (int l = 0; l < c_.layers; ++l) optimizer_step_layer(l, grad(l), step, s);
}

void Model::optimizer_step_layer(int l, const void* grad, int step, cudaStream_t s) {
  std::size_t off = l * layer_elems();
  if (c_.bf16_grads) {
    adamw_step(master_ + off, static_cast<const __nv_bfloat16*>(grad), m_ + off, v_ + off,
               weights_ + off, layer_elems(), adamw_, step, s);
  } else {
    adamw_step(master_ + off, static_cast<const float*>(grad), m_ + off, v_ + off, weights_ + off,
               layer_elems(), adamw_, step, s);
  }
}

float Model::take_loss(int steps, cudaStream_t s) {
  float sum = 0.0f;
  cudaMemcpyAsync(&sum, loss_, sizeof(float), cudaMemcpyDeviceToHost, s);
  cudaMemsetAsync(loss_, 0, sizeof(float), s);
  cudaStreamSynchronize(s);
  return sum / (static_cast<float>(c_.batch) * c_.hidden * (steps > 0 ? steps : 1));
}

}  // namespace mlp
