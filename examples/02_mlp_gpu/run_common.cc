// The save/resume, progress and checksum helpers of mlp_gpu (run_common.h).
#include "examples/02_mlp_gpu/run_common.h"

#include <algorithm>
#include <cstdio>

#include "examples/02_mlp_gpu/checkpoint.h"

namespace mlp {

void report(rtd::Context& ctx, Model& model, const MlpConfig& config, int step, int first_step,
            int log_every, int steps, Progress& p, cudaStream_t stream) {
  ++p.steps;
  if (step % log_every != 0 && step != steps) return;
  const int since =
      std::min(step - first_step + 1, step % log_every == 0 ? log_every : step % log_every);
  float loss = model.take_loss(since, stream);  // synchronizes the stream
  const auto now = std::chrono::steady_clock::now();
  const double secs = std::chrono::duration<double>(now - p.since).count();
  const float wait_ms = p.waits.take_ms() / p.steps;
  std::size_t free = 0, total = 0;
  cudaMemGetInfo(&free, &total);
  if (ctx.rank() == 0) {
    std::printf("step %d loss %.6e tokens/s %.0f step_ms %.2f comm_wait_ms %.2f mem_GiB %.2f\n",
                step, loss, static_cast<double>(p.steps) * config.batch * ctx.world_size() / secs,
                1e3 * secs / p.steps, wait_ms, static_cast<double>(total - free) / (1u << 30));
    std::fflush(stdout);
  }
  p.since = now;
  p.steps = 0;
}

void print_checksum(rtd::Context& ctx, const rtd::ckpt::State& state) {
  const std::uint64_t sum = weights_checksum(ctx, state, "mlp_gpu/checksum/");
  if (ctx.rank() == 0) std::printf("final weights checksum %016llx\n", (unsigned long long)sum);
}

std::unique_ptr<rtd::ckpt::Checkpointer> open_checkpoints(rtd::Context& ctx, const CkptFlags& f) {
  if (f.dir.empty()) return nullptr;
  return std::make_unique<rtd::ckpt::Checkpointer>(
      ctx.store(), ctx.rank(), ctx.world_size(), rtd::ckpt::Options{.dir = f.dir, .keep_last = 2});
}

int resume(rtd::Context& ctx, rtd::ckpt::Checkpointer* ckpt, rtd::ckpt::State& state,
           rtd::data::Loader* inputs) {
  if (!ckpt) return 1;
  auto step = ckpt->load(state);
  if (!step) return 1;
  if (inputs && state.meta.count("data_position"))
    inputs->set_position(state.meta["data_position"]);
  if (ctx.rank() == 0) std::printf("resumed from step %lld\n", static_cast<long long>(*step));
  return static_cast<int>(*step) + 1;
}

void maybe_save(rtd::ckpt::Checkpointer* ckpt, const CkptFlags& f, int step,
                const std::function<rtd::ckpt::State()>& make_state, rtd::data::Loader* inputs,
                cudaStream_t stream) {
  if (!ckpt || f.every <= 0 || step % f.every != 0) return;
  rtd::ckpt::State state = make_state();
  if (inputs) state.meta["data_position"] = inputs->position();
  if (f.async) {
    ckpt->save_async(step, state, rtd::StreamRef{stream});
  } else {
    cudaStreamSynchronize(stream);
    ckpt->save(step, state);
  }
}

}  // namespace mlp
