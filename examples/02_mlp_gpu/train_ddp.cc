// mlp_gpu's data-parallel training, and its in-process recovery (train_ddp.h).
#include "examples/02_mlp_gpu/train_ddp.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "examples/02_mlp_gpu/checkpoint.h"
#include "examples/02_mlp_gpu/inputs.h"

namespace mlp {
namespace {

long long wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void train_ddp(rtd::Context& ctx, const MlpConfig& config, const rtd::DDPOptions& options,
               const DdpRun& run, cudaStream_t stream) {
  Model model(config, stream);
  std::vector<rtd::BufferView> params;
  // What a replacement receives from a survivor: the fp32 masters and
  // AdamW's moments (the step comes with them).
  std::vector<rtd::BufferView> replicated;
  for (int l = 0; l < config.layers; ++l) {
    for (float* p : {model.master(l), model.exp_avg(l), model.exp_avg_sq(l)}) {
      rtd::BufferView v{p, model.layer_elems(), rtd::DType::kFloat32, rtd::DeviceType::kCuda,
                        ctx.local_rank()};
      if (p == model.master(l)) params.push_back(v);
      replicated.push_back(v);
    }
  }
  cudaStreamSynchronize(stream);  // weights initialized before DDP broadcasts them
  rtd::Recovery recovery(ctx);
  std::int64_t done = 0;  // the last step completed
  if (run.recover) {
    std::printf("rank %d pid %d generation %d\n", ctx.rank(), static_cast<int>(getpid()),
                recovery.generation());
    std::fflush(stdout);
    recovery.enable();
  }
  if (recovery.replacement()) {
    const int source = recovery.sync(replicated, &done);
    std::printf("rank %d joined generation %d, the state from rank %d: resuming after step %lld\n",
                ctx.rank(), recovery.generation(), source, static_cast<long long>(done));
    std::fflush(stdout);
  }
  // After a sync every rank holds the same weights: no broadcast then.
  auto make_ddp = [&](bool broadcast) {
    rtd::DDPOptions o = options;
    o.broadcast_parameters = broadcast;
    return std::make_unique<rtd::DDP>(ctx.comm(), recovery.store(), params, o);
  };
  std::unique_ptr<rtd::DDP> ddp = make_ddp(!recovery.replacement());
  cudaDeviceSynchronize();  // DDP broadcast rank 0's weights on the default stream
  model.refresh_weights(stream);
  auto ckpt = open_checkpoints(ctx, run.ckpt);
  auto inputs = run.ckpt.data.empty()
                    ? nullptr
                    : open_inputs(run.ckpt.data, config.hidden, config.batch, ctx);
  int first_step = static_cast<int>(done) + 1;
  if (!recovery.replacement()) {
    rtd::ckpt::State loaded = ddp_state(model, config, ctx, false, 0);
    cudaStreamSynchronize(stream);
    first_step = resume(ctx, ckpt.get(), loaded, inputs.get());
    if (first_step > 1) model.refresh_weights(stream);  // 16-bit copies of the loaded weights
  }
  const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const bool first_attempt =
      (restarts == nullptr || std::string(restarts) == "0") && !recovery.replacement();
  rtd::StreamRef s{stream};
  auto grad = [&](int l) { return ddp->grad(l).data; };
  Progress progress;
  bool resumed = first_step > 1;
  for (int step = first_step; step <= run.steps; ++step) {
    try {
      if (run.recover && recovery.should_move())
        throw rtd::Error(rtd::ErrorCategory::kBackend, "a node joined the job");
      if (step == run.kill_at_step && first_attempt && ctx.rank() == ctx.world_size() - 1) {
        std::printf("rank %d kills itself at step %d at %lld ms\n", ctx.rank(), step, wall_ms());
        std::fflush(stdout);
        raise(SIGKILL);
      }
      if (inputs) model.set_input(inputs->next_on_device(s), stream);
      {
        rtd::trace::Scope scope("forward");
        model.forward(stream);
      }
      {
        rtd::trace::Scope scope("backward");
        model.backward(
            grad, [&](int l) { ddp->grad_ready(l, s); }, stream);
      }
      rtd::trace::Scope scope("optimizer");
      if (run.recover) {
        // A step counts only when its reductions completed on every rank
        // that goes on: the host waits for them and for a barrier (which
        // fails where the communicator was aborted meanwhile) before any
        // update, so that an aborted reduction never reaches the weights.
        ddp->finish(s);
        progress.waits.before(stream);
        cudaStreamSynchronize(stream);
        ctx.comm().barrier(s)->wait();
        progress.waits.after(stream);
        model.optimizer_step(grad, step, stream);
      } else {
        // Each layer's update starts as soon as its bucket is reduced: the
        // last layers' gradients arrive first, and their updates hide layer
        // 0's reduction.
        for (int l = config.layers - 1; l >= 0; --l) {
          progress.waits.before(stream);
          ddp->wait_grad(l, s);
          progress.waits.after(stream);
          model.optimizer_step_layer(l, grad(l), step, stream);
        }
        ddp->finish(s);
      }
      done = step;
      if (resumed && ctx.rank() == 0) {
        cudaStreamSynchronize(stream);
        std::printf("step %d completed after the resume at %lld ms\n", step, wall_ms());
        std::fflush(stdout);
      }
      resumed = false;
      report(ctx, model, config, step, first_step, run.log_every, run.steps, progress, stream);
      maybe_save(
          ckpt.get(), run.ckpt, step, [&] { return ddp_state(model, config, ctx, true, step); },
          inputs.get(), stream);
    } catch (const rtd::Error& e) {
      // A peer was lost in this step: the communicator is aborted (the
      // stream's waits on it end), the DDP built on it goes, and a
      // replacement (or the next round) comes; every rank then takes the
      // lowest surviving rank's state and goes on after its last step.
      if (!run.recover) throw;
      std::fprintf(stderr, "rank %d: step %d: %s; recovering\n", ctx.rank(), step, e.what());
      const auto lost = std::chrono::steady_clock::now();
      if (!recovery.recover([&] {
            cudaStreamSynchronize(stream);
            ddp.reset();
          }))
        throw;
      const auto rebuilt = std::chrono::steady_clock::now();
      const int source = recovery.sync(replicated, &done);
      if (ckpt) ckpt = open_checkpoints(ctx, run.ckpt);  // the new round's store, where it moved
      ddp = make_ddp(false);
      model.refresh_weights(stream);
      cudaStreamSynchronize(stream);
      auto ms = [](auto a, auto b) {
        return std::chrono::duration<double, std::milli>(b - a).count();
      };
      std::printf(
          "rank %d recovered in generation %d in %.0f ms (%.0f ms to rebuild the communicator, "
          "%.0f ms to receive the state), the state from rank %d: resuming after step %lld\n",
          ctx.rank(), recovery.generation(), ms(lost, std::chrono::steady_clock::now()),
          ms(lost, rebuilt), ms(rebuilt, std::chrono::steady_clock::now()), source,
          static_cast<long long>(done));
      std::fflush(stdout);
      step = static_cast<int>(done);
      resumed = true;
    }
  }
  if (ckpt) ckpt->wait();
  cudaStreamSynchronize(stream);
  print_checksum(ctx, ddp_state(model, config, ctx, true, run.steps));
}

}  // namespace mlp
