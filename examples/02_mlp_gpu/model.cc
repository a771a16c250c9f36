// Model: buffers, forward, backward with per-layer gradient hand-off, AdamW.
#include "examples/02_mlp_gpu/model.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

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

template <typename Fn>
void Model::typed(Fn&& fn) const {
  if (c_.fp16)
    fn(static_cast<__half*>(nullptr));
  else
    fn(static_cast<__nv_bfloat16*>(nullptr));
}

// T from a typed() null pointer.
#define ELEM(tag) std::remove_pointer_t<decltype(tag)>

Model::Model(const MlpConfig& config, cudaStream_t s) : c_(config) {
  if (c_.hidden % 4 != 0 || c_.batch % 2 != 0 || c_.layers < 1) {
    throw std::runtime_error("the MLP needs hidden % 4 == 0, an even batch and at least one layer");
  }
  const std::size_t w = layer_elems() * c_.layers;
  const std::size_t act = std::size_t(c_.batch) * c_.hidden;
  bytes_ += gemm_.workspace_bytes();
  gemm_.set_type(c_.fp16 ? CUDA_R_16F : CUDA_R_16BF);
  if (!c_.external_weights) {
    master_ = alloc<float>(w);
    m_ = alloc<float>(w);
    v_ = alloc<float>(w);
    weights_ = alloc<std::uint16_t>(w);
  }
  for (int l = 0; l <= c_.layers; ++l) acts_.push_back(alloc<std::uint16_t>(act));
  for (int l = 0; l < c_.layers; ++l) pre_.push_back(alloc<std::uint16_t>(act));
  grad_a_ = alloc<std::uint16_t>(act);
  grad_b_ = alloc<std::uint16_t>(act);
  loss_ = alloc<float>(1);
  if (!c_.external_weights) {
    init_master(master_, s);
    refresh_weights(s);
    cudaMemsetAsync(m_, 0, w * sizeof(float), s);
    cudaMemsetAsync(v_, 0, w * sizeof(float), s);
  }
  cudaMemsetAsync(loss_, 0, sizeof(float), s);
  typed([&](auto* tag) {
    init_uniform_16(static_cast<ELEM(tag)*>(acts_[0]), act, 1.7320508f, 11, s);
  });
}

void Model::init_master(float* out, cudaStream_t s) const {
  // Uniform in +-2.66/sqrt(fan_in): variance 2.36/H, so that a GELU layer
  // keeps its input's variance (E[gelu(z)^2] = 0.425 for z ~ N(0, 1)) and
  // the deepest layers' activations and gradients stay in a normal range
  // (torch.nn.Linear's +-1/sqrt(fan_in) divides their variance by about 12 a layer, to
  // zeros and denormals). The input: uniform of variance 1.
  init_uniform(out, layer_elems() * c_.layers, 2.66f / std::sqrt(static_cast<float>(c_.hidden)), 7,
               s);
}

Model::~Model() {
  for (void* p : allocations_) cudaFree(p);
}

void Model::set_input(const void* batch, cudaStream_t s) {
  cudaMemcpyAsync(acts_[0], batch, input_bytes(), cudaMemcpyDeviceToDevice, s);
}

void Model::refresh_weights(cudaStream_t s) {
  typed([&](auto* tag) {
    to_16(master_, static_cast<ELEM(tag)*>(weights_), layer_elems() * c_.layers, s);
  });
}

void Model::forward(cudaStream_t s, const LayerHooks* hooks) {
  const std::size_t act = std::size_t(c_.batch) * c_.hidden;
  for (int l = 0; l < c_.layers; ++l) {
    if (hooks && hooks->before_forward) hooks->before_forward(l);
    gemm_.forward(acts_[l], weight(l, hooks), pre_[l], c_.batch, c_.hidden, c_.hidden, s);
    if (hooks && hooks->after_forward) hooks->after_forward(l);
    typed([&](auto* tag) {
      using T = ELEM(tag);
      gelu_forward(static_cast<const T*>(pre_[l]), static_cast<T*>(acts_[l + 1]), act, s);
    });
  }
  typed([&](auto* tag) {
    using T = ELEM(tag);
    loss_and_grad(static_cast<const T*>(acts_[c_.layers]), static_cast<const T*>(acts_[0]),
                  static_cast<T*>(grad_a_), loss_, act, loss_scale_, s);
  });
}

void Model::backward(const std::function<void*(int)>& grad, const std::function<void(int)>& ready,
                     cudaStream_t s, const LayerHooks* hooks) {
  const std::size_t act = std::size_t(c_.batch) * c_.hidden;
  void* upstream = grad_a_;  // d loss / d acts_[l + 1]
  void* scratch = grad_b_;
  gemm_.set_sm_count_target(backward_sms_);
  for (int l = c_.layers - 1; l >= 0; --l) {
    if (hooks && hooks->before_backward) hooks->before_backward(l);
    // Read before ready(l): a sharding engine may release the layer's weights
    // then (the product below is already ordered before any reuse of them).
    const void* w = weight(l, hooks);
    typed([&](auto* tag) {  // d loss / d pre_[l]
      using T = ELEM(tag);
      gelu_backward(static_cast<const T*>(pre_[l]), static_cast<const T*>(upstream),
                    static_cast<T*>(scratch), act, s);
    });
    gemm_.grad_weight(scratch, acts_[l], grad(l), c_.half_grads, c_.batch, c_.hidden, c_.hidden, s);
    ready(l);
    if (l > 0) gemm_.grad_input(scratch, w, upstream, c_.batch, c_.hidden, c_.hidden, s);
  }
  gemm_.set_sm_count_target(0);
}

void Model::optimizer_step(const std::function<const void*(int)>& grad, int step, cudaStream_t s) {
  for (int l = 0; l < c_.layers; ++l) optimizer_step_layer(l, grad(l), step, s);
}

void Model::optimizer_step_layer(int l, const void* grad, int step, cudaStream_t s) {
  const std::size_t off = l * layer_elems();
  typed([&](auto* tag) {
    using T = ELEM(tag);
    T* w = static_cast<T*>(weights_) + off;
    if (c_.half_grads)
      adamw_step(master_ + off, static_cast<const T*>(grad), m_ + off, v_ + off, w, layer_elems(),
                 adamw_, step, 1.0f / loss_scale_, s);
    else
      adamw_step(master_ + off, static_cast<const float*>(grad), m_ + off, v_ + off, w,
                 layer_elems(), adamw_, step, 1.0f / loss_scale_, s);
  });
}

float Model::take_loss(int steps, cudaStream_t s) {
  float sum = 0.0f;
  cudaMemcpyAsync(&sum, loss_, sizeof(float), cudaMemcpyDeviceToHost, s);
  cudaMemsetAsync(loss_, 0, sizeof(float), s);
  cudaStreamSynchronize(s);
  return sum / (static_cast<float>(c_.batch) * c_.hidden * (steps > 0 ? steps : 1));
}

}  // namespace mlp
