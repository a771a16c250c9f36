// 02_mlp_gpu: the reference MLP of torch_anchor.py trained data-parallel on
// GPUs: bf16 products through cuBLASLt, fp32 master weights, fused AdamW, and
// rtd::DDP reducing each layer's gradient while backward goes on, or rtd::FSDP
// sharding the model states (--shard zero1|zero2|zero3|hybrid; one unit per
// layer; --fp16: float16 products with dynamic loss scaling).
//   dtrun --nproc-per-node=2 mlp_gpu --steps 50
//   dtrun --nproc-per-node=2 mlp_gpu --steps 50 --shard zero3 --fp16 1
// --ckpt-dir DIR --ckpt-every K saves the weights and AdamW's state every K
// steps (--ckpt-async 1: in the background) and resumes from the latest valid
// checkpoint at start, whatever strategy and number of GPUs saved it.
// --data DIR reads the inputs through rtd::data's loader (written first by
// --make-data DIR --records N); the position is saved with the checkpoint.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "examples/02_mlp_gpu/checkpoint.h"
#include "examples/02_mlp_gpu/inputs.h"
#include "examples/02_mlp_gpu/model.h"
#include "examples/02_mlp_gpu/run_common.h"
#include "examples/02_mlp_gpu/sharded.h"
#include "examples/02_mlp_gpu/train_ddp.h"
#include "rt_dist/rt_dist.h"

namespace {

using mlp::CkptFlags;
using mlp::maybe_save;
using mlp::open_checkpoints;
using mlp::print_checksum;
using mlp::Progress;
using mlp::report;
using mlp::resume;

// The same training with the model states sharded: 16-bit weights gathered per
// layer from fp32 master shards, gradients reduce-scattered into the shards.
// float16 scales the loss by FSDP's dynamic loss scale (a step with an
// overflow is skipped on every rank).
void train_sharded(rtd::Context& ctx, mlp::MlpConfig config, rtd::FSDPOptions options, int steps,
                   int log_every, const CkptFlags& ck, cudaStream_t stream) {
  config.external_weights = true;
  mlp::Model model(config, stream);
  options.param_dtype = config.fp16 ? rtd::DType::kFloat16 : rtd::DType::kBFloat16;
  if (config.fp16) options.loss_scale.dynamic = true;
  std::unique_ptr<rtd::FSDP> sharded = mlp::shard_model(ctx, model, config.layers, options, stream);
  rtd::FSDP& fsdp = *sharded;
  if (ctx.rank() == 0) std::printf("%s\n", fsdp.describe().c_str());
  rtd::StreamRef s{stream};
  mlp::LayerHooks hooks = mlp::fsdp_hooks(fsdp, s);
  Progress progress;
  // The stream waits for each layer's gather in pre_forward / pre_backward.
  hooks.before_forward = [&](int l) {
    progress.waits.before(stream);
    fsdp.pre_forward(l, s);
    progress.waits.after(stream);
  };
  hooks.before_backward = [&](int l) {
    progress.waits.before(stream);
    fsdp.pre_backward(l, s);
    progress.waits.after(stream);
  };
  auto ckpt = open_checkpoints(ctx, ck);
  auto inputs =
      ck.data.empty() ? nullptr : mlp::open_inputs(ck.data, config.hidden, config.batch, ctx);
  const auto names = mlp::fsdp_names(config);
  rtd::ckpt::State loaded = fsdp.checkpoint_state(names, false);
  const int first_step = resume(ctx, ckpt.get(), loaded, inputs.get());
  if (first_step > 1) fsdp.after_load(loaded, s);
  int skipped = 0;
  for (int step = first_step; step <= steps; ++step) {
    if (inputs) model.set_input(inputs->next_on_device(s), stream);
    model.set_loss_scale(fsdp.loss_scale());
    {
      rtd::trace::Scope scope("forward");
      model.forward(stream, &hooks);
    }
    {
      rtd::trace::Scope scope("backward");
      model.backward([&](int l) { return fsdp.grad(l, 0).data; },
                     [&](int l) { fsdp.post_backward(l, s); }, stream, &hooks);
    }
    if (!fsdp.step(s)) ++skipped;
    report(ctx, model, config, step, first_step, log_every, steps, progress, stream);
    maybe_save(
        ckpt.get(), ck, step, [&] { return fsdp.checkpoint_state(names, true); }, inputs.get(),
        stream);
  }
  if (ckpt) ckpt->wait();
  cudaStreamSynchronize(stream);
  print_checksum(ctx, fsdp.checkpoint_state(names, true));
  if (ctx.rank() == 0 && config.fp16)
    std::printf("loss scale %.0f, %d of %d steps skipped (overflow)\n", fsdp.loss_scale(), skipped,
                steps);
  if (ctx.rank() == 0 && options.offload != rtd::Offload::kNone) {
    const rtd::FSDP::OffloadTimes t = fsdp.offload_times();
    const int n = steps - first_step + 1;
    std::printf("offload: host AdamW %.1f ms per step, step() waited %.1f ms per step for it\n",
                1e3 * t.host_adamw_s / n, 1e3 * t.step_wait_s / n);
    if (options.offload == rtd::Offload::kNvme)
      std::printf("offload nvme: the host steps waited %.1f ms per step for the disk\n",
                  1e3 * t.read_wait_s / n);
  }
}

}  // namespace

int main(int argc, char** argv) {
  mlp::MlpConfig config;
  int steps = 30, log_every = 10;
  rtd::DDPOptions ddp_options;
  bool reduce_given = false;
  rtd::FSDPOptions shard_options;
  bool sharded = false;
  int update_in_backward = -1;  // -1: as --offload and --fp16 say
  CkptFlags ck;
  bool recover = false;
  int kill_at_step = 0;
  std::string make_data;
  long long records = 65536;
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
      config.half_grads = value == "bf16";
    } else if (flag == "--fp16" && (value == "0" || value == "1")) {
      config.fp16 = value == "1";
    } else if (flag == "--shard" &&
               (value == "ddp" || rtd::parse_shard_strategy(value, &shard_options.strategy))) {
      sharded = value != "ddp";
    } else if (flag == "--reshard" && (value == "0" || value == "1")) {
      shard_options.reshard_after_forward = value == "1";
    } else if (flag == "--offload" && rtd::parse_offload(value, &shard_options.offload)) {
    } else if (flag == "--offload-dir" && !value.empty()) {
      shard_options.offload_dir = value;
    } else if (flag == "--offload-io-threads" && std::atoi(value.c_str()) > 0) {
      shard_options.offload_io_threads = std::atoi(value.c_str());
    } else if (flag == "--offload-threads" && std::atoi(value.c_str()) > 0) {
      shard_options.offload_threads = std::atoi(value.c_str());
    } else if (flag == "--delayed-update" && (value == "0" || value == "1")) {
      shard_options.delayed_update = value == "1";
    } else if (flag == "--update-in-backward" && (value == "0" || value == "1")) {
      update_in_backward = value == "1";
    } else if (flag == "--ckpt-dir" && !value.empty()) {
      ck.dir = value;
    } else if (flag == "--ckpt-every" && std::atoi(value.c_str()) > 0) {
      ck.every = std::atoi(value.c_str());
    } else if (flag == "--ckpt-async" && (value == "0" || value == "1")) {
      ck.async = value == "1";
    } else if (flag == "--data" && !value.empty()) {
      ck.data = value;
    } else if (flag == "--recover" && (value == "0" || value == "1")) {
      recover = value == "1";
    } else if (flag == "--kill-at-step" && std::atoi(value.c_str()) > 0) {
      kill_at_step = std::atoi(value.c_str());
    } else if (flag == "--make-data" && !value.empty()) {
      make_data = value;
    } else if (flag == "--records" && std::atoll(value.c_str()) > 0) {
      records = std::atoll(value.c_str());
    } else {
      std::fprintf(
          stderr,
          "usage: mlp_gpu [--hidden H] [--layers L] [--batch B] [--steps N] "
          "[--log-every K] [--bucket-mb MB] [--grads fp32|bf16] [--reduce fp32|bf16]\n"
          "               [--shard ddp|zero1|zero2|zero3|hybrid] [--reshard 0|1] "
          "[--fp16 0|1]\n"
          "               [--offload none|optimizer|params|nvme] [--offload-dir DIR]\n"
          "               [--offload-threads N]\n"
          "               [--update-in-backward 0|1] [--delayed-update 0|1]\n"
          "               [--ckpt-dir DIR [--ckpt-every K] [--ckpt-async 0|1]]\n"
          "               [--data DIR | --make-data DIR --records N]\n"
          "               [--recover 1] [--kill-at-step S]\n"
          "  --grads bf16: bf16 weight gradients, reduced in bf16 unless --reduce fp32\n"
          "  --shard: shard the model states (bf16 weights from fp32 master shards;\n"
          "  gradients in the --reduce dtype); --reshard 0 keeps gathered weights\n"
          "  from forward to backward; --fp16 1 (with --shard): float16 products and\n"
          "  weights, dynamic loss scaling, float16 gradients with --reduce bf16\n"
          "  --offload (with --shard): AdamW and its states in host memory, the\n"
          "  parameter shards too with params (zero3); nvme: as optimizer, the\n"
          "  states in a file in --offload-dir (a local disk); --update-in-backward: step\n"
          "  each layer as soon as its gradient is reduced (default: 1 with\n"
          "  --offload, unless --fp16 1); --delayed-update 1: each step computes\n"
          "  with the weights of the step before last, so that the host's steps\n"
          "  run under the next forward (--offload optimizer, zero3)\n"
          "  --ckpt-dir: resume from the latest valid checkpoint there (saved by any\n"
          "  strategy and number of GPUs); --ckpt-every K: save every K steps\n"
          "  --data: inputs (hidden bfloat16 values per token) from shard files\n"
          "  --recover 1 (DDP, under dtrun --recovery=in-process): a lost worker's\n"
          "  peers keep their processes, and its replacement gets their state;\n"
          "  --kill-at-step S: the last rank kills itself at step S once (tests)\n");
      return 2;
    }
  }
  if (!make_data.empty()) {
    try {
      mlp::make_inputs(make_data, records, config.hidden);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mlp_gpu: %s\n", e.what());
      return 1;
    }
    std::printf("wrote %lld inputs of %d bfloat16 values to %s\n", records, config.hidden,
                make_data.c_str());
    return 0;
  }
  if (!ck.data.empty() && config.fp16) {
    std::fprintf(stderr, "mlp_gpu: --data holds bfloat16 inputs; it does not go with --fp16 1\n");
    return 2;
  }
  if (ck.every > 0 && ck.dir.empty()) {
    std::fprintf(stderr, "mlp_gpu: --ckpt-every needs --ckpt-dir\n");
    return 2;
  }
  if ((shard_options.offload == rtd::Offload::kNvme) != !shard_options.offload_dir.empty()) {
    std::fprintf(stderr, "mlp_gpu: --offload nvme and --offload-dir DIR go together\n");
    return 2;
  }
  if (shard_options.offload != rtd::Offload::kNone && !sharded) {
    std::fprintf(stderr, "mlp_gpu: --offload needs --shard zero1|zero2|zero3|hybrid\n");
    return 2;
  }
  shard_options.update_in_backward =
      update_in_backward >= 0 ? update_in_backward == 1
                              : shard_options.offload != rtd::Offload::kNone && !config.fp16;
  if (recover && (sharded || ck.async)) {
    std::fprintf(stderr,
                 "mlp_gpu: --recover 1 recovers DDP's replicated state: it does not take --shard "
                 "(a shard exists on one rank only: restart from a checkpoint) or --ckpt-async\n");
    return 2;
  }
  if (config.fp16 && !sharded) {
    std::fprintf(stderr, "mlp_gpu: --fp16 needs --shard (FSDP scales the loss)\n");
    return 2;
  }
  ddp_options.grad_dtype = config.half_grads ? rtd::DType::kBFloat16 : rtd::DType::kFloat32;
  if (!reduce_given) ddp_options.reduce_dtype = ddp_options.grad_dtype;
  try {
    auto ctx = rtd::init({.backend = rtd::Backend::kNccl});
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (sharded) {
      config.half_grads = ddp_options.reduce_dtype == rtd::DType::kBFloat16;
      // 16-bit gradients are in the products' type.
      shard_options.reduce_dtype = !config.half_grads ? rtd::DType::kFloat32
                                   : config.fp16      ? rtd::DType::kFloat16
                                                      : rtd::DType::kBFloat16;
      train_sharded(*ctx, config, shard_options, steps, log_every, ck, stream);
      return 0;
    }
    mlp::train_ddp(*ctx, config, ddp_options,
                   mlp::DdpRun{.steps = steps,
                               .log_every = log_every,
                               .ckpt = ck,
                               .recover = recover,
                               .kill_at_step = kill_at_step},
                   stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlp_gpu: %s\n", e.what());
    return 1;
  }
  return 0;
}
