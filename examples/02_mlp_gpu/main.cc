// 02_mlp_gpu: the reference MLP of torch_anchor.py trained data-parallel on
// GPUs: bf16 products through cuBLASLt, fp32 master weights, fused AdamW, and
// rtd::DDP reducing each layer's gradient while backward goes on.
//   dtrun --nproc-per-node=2 mlp_gpu --steps 50
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "examples/02_mlp_gpu/model.h"
#include "rt_dist/rt_dist.h"

int main(int argc, char** argv) {
  mlp::MlpConfig config;
  int steps = 30, log_every = 10;
  rtd::DDPOptions ddp_options;
  bool reduce_given = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--hidden")
      config.hidden = std::stoi(value);
    else if (flag == "--layers")
      config.layers = std::stoi(value);
    else if (flag == "--batch")
      config.batch = std::stoi(value);
    else if (flag == "--steps")
      steps = std::stoi(value);
    else if (flag == "--log-every")
      log_every = std::stoi(value);
    else if (flag == "--bucket-mb")
      ddp_options.bucket_mb = std::stod(value);
    else if (flag == "--reduce" && (value == "fp32" || value == "bf16")) {
      ddp_options.reduce_dtype = value == "bf16" ? rtd::DType::kBFloat16 : rtd::DType::kFloat32;
      reduce_given = true;
    } else if (flag == "--grads" && (value == "fp32" || value == "bf16")) {
      config.bf16_grads = value == "bf16";
    } else {
      std::fprintf(stderr,
                   "usage: mlp_gpu [--hidden H] [--layers L] [--batch B] [--steps N] "
                   "[--log-every K] [--bucket-mb MB] [--grads fp32|bf16] [--reduce fp32|bf16]\n"
                   "  --grads bf16: bf16 weight gradients, reduced in bf16 unless --reduce fp32\n");
      return 2;
    }
  }
  ddp_options.grad_dtype = config.bf16_grads ? rtd::DType::kBFloat16 : rtd::DType::kFloat32;
  if (!reduce_given) ddp_options.reduce_dtype = ddp_options.grad_dtype;
  try {
    auto ctx = rtd::init({.backend = rtd::Backend::kNccl});
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    mlp::Model model(config, stream);
    std::vector<rtd::BufferView> params;
    for (int l = 0; l < config.layers; ++l) {
      params.push_back({model.master(l), model.layer_elems(), rtd::DType::kFloat32,
                        rtd::DeviceType::kCuda, ctx->local_rank()});
    }
    cudaStreamSynchronize(stream);  // weights initialized before DDP broadcasts them
    rtd::DDP ddp(*ctx, params, ddp_options);
    cudaDeviceSynchronize();  // DDP broadcast rank 0's weights on the default stream
    model.refresh_weights(stream);
    rtd::StreamRef s{stream};
    auto grad = [&](int l) { return ddp.grad(l).data; };
    auto start = std::chrono::steady_clock::now();
    for (int step = 1; step <= steps; ++step) {
      model.forward(stream);
      model.backward(
          grad, [&](int l) { ddp.grad_ready(l, s); }, stream);
      // Each layer's update starts as soon as its bucket is reduced: the last
      // layers' gradients arrive first, and their updates hide layer 0's reduction.
      for (int l = config.layers - 1; l >= 0; --l) {
        ddp.wait_grad(l, s);
        model.optimizer_step_layer(l, grad(l), step, stream);
      }
      ddp.finish(s);
      if (step % log_every == 0 || step == steps) {
        float loss = model.take_loss(step % log_every == 0 ? log_every : step % log_every, stream);
        double secs =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (ctx->rank() == 0) {
          std::printf("step %d loss %.6e tokens/s %.0f\n", step, loss,
                      static_cast<double>(step) * config.batch * ctx->world_size() / secs);
          std::fflush(stdout);
        }
      }
    }
    cudaStreamSynchronize(stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlp_gpu: %s\n", e.what());
    return 1;
  }
  return 0;
}
