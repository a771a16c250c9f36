// The reference MLP of shared/anchors/torch_anchor.py on one GPU: L layers of
// Linear(H, H, bias=False) + GELU, loss mean(y^2), 16-bit products (bfloat16,
// or float16 with a loss scale) with fp32 accumulation, fp32 master weights
// and a fused AdamW. Weight gradients are fp32, or 16-bit in the products'
// type (half_grads: the product rounds them once and AdamW reads them as they
// are); they go wherever the caller says (DDP's buckets), and the caller hears
// as each becomes final.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <vector>

#include "examples/02_mlp_gpu/gemm.h"
#include "examples/02_mlp_gpu/kernels.h"

namespace mlp {

struct MlpConfig {
  int hidden = 8192;
  int layers = 8;
  int batch = 8192;         // tokens per rank per step
  bool half_grads = false;  // weight gradients in the products' 16-bit type
  // float16 products instead of bfloat16: set_loss_scale() then keeps the
  // loss gradient (2 y / (B H)) from underflowing float16.
  bool fp16 = false;
  // The weights, their fp32 masters and the optimizer state live elsewhere (a
  // sharding engine): the model allocates none of them and reads each layer's
  // 16-bit weights through LayerHooks::weight.
  bool external_weights = false;
};

// Where a trainer that shards the weights steps in: before and after each
// layer's forward, before each layer's backward, and where the 16-bit weights
// of a layer are (valid from before_* until the layer's ready/after_forward).
struct LayerHooks {
  std::function<const void*(int)> weight;
  std::function<void(int)> before_forward, after_forward, before_backward;
};

class Model {
 public:
  Model(const MlpConfig& config, cudaStream_t stream);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  std::size_t layer_elems() const { return std::size_t(c_.hidden) * c_.hidden; }
  float* master(int layer) { return master_ + layer * layer_elems(); }
  // AdamW's first and second moments of a layer (fp32, like the master).
  float* exp_avg(int layer) { return m_ + layer * layer_elems(); }
  float* exp_avg_sq(int layer) { return v_ + layer * layer_elems(); }
  // Recomputes the 16-bit copies from the fp32 weights (after DDP broadcast them).
  void refresh_weights(cudaStream_t s);
  // The initial fp32 weights of every layer (layer l at out + l * layer_elems()),
  // the values the model's own masters start from.
  void init_master(float* out, cudaStream_t s) const;
  // Replaces the input (batch x hidden 16-bit values in the products' type,
  // in GPU memory) with a copy of `batch`, enqueued on s.
  void set_input(const void* batch, cudaStream_t s);
  std::size_t input_bytes() const { return std::size_t(c_.batch) * c_.hidden * 2; }
  // Forward on the input (a fixed one unless set_input gave another); the
  // loss accumulates on the device.
  void forward(cudaStream_t s, const LayerHooks* hooks = nullptr);
  // grad(l): where layer l's weight gradient goes (fp32, or 16-bit with
  // half_grads); ready(l) is called right after it is enqueued (last layer first).
  // The gradients are multiplied by the loss scale.
  void backward(const std::function<void*(int)>& grad, const std::function<void(int)>& ready,
                cudaStream_t s, const LayerHooks* hooks = nullptr);
  // Backward's products use this many SMs (0: all), leaving the others to a
  // gradient reduction running beside them.
  void set_backward_sm_count(int sms) { backward_sms_ = sms; }
  void optimizer_step(const std::function<const void*(int)>& grad, int step, cudaStream_t s);
  // AdamW on one layer, so that a trainer can update each layer as soon as its
  // gradient is reduced.
  void optimizer_step_layer(int layer, const void* grad, int step, cudaStream_t s);
  std::size_t grad_elem_bytes() const { return c_.half_grads ? 2 : 4; }
  // The factor forward's loss gradient is multiplied by (1 by default); the
  // model's own optimizer divides it out again.
  void set_loss_scale(float scale) { loss_scale_ = scale; }
  // Mean loss of the steps since the last call (synchronizes s).
  float take_loss(int steps, cudaStream_t s);
  // Bytes this model allocated (weights, optimizer state, activations, workspace).
  std::size_t bytes() const { return bytes_; }

 private:
  template <typename T>
  T* alloc(std::size_t n);
  const void* weight(int l, const LayerHooks* hooks) const {
    return hooks && hooks->weight ? hooks->weight(l)
                                  : static_cast<const char*>(weights_) + l * layer_elems() * 2;
  }
  // fn(T* null) with T the products' 16-bit type.
  template <typename Fn>
  void typed(Fn&& fn) const;

  MlpConfig c_;
  Gemm gemm_;
  std::vector<void*> allocations_;
  std::size_t bytes_ = 0;
  float* master_ = nullptr;
  float* m_ = nullptr;
  float* v_ = nullptr;
  // 16-bit buffers (bfloat16 or float16, as c_.fp16 says):
  void* weights_ = nullptr;  // copies of the weights used by the products
  std::vector<void*> acts_;  // acts_[l]: input of layer l; acts_[L]: output
  std::vector<void*> pre_;   // pre_[l]: layer l's product before GELU
  void* grad_a_ = nullptr;   // gradient flowing back through activations
  void* grad_b_ = nullptr;
  float* loss_ = nullptr;
  AdamW adamw_;
  int backward_sms_ = 0;
  float loss_scale_ = 1.0f;
};

}  // namespace mlp
