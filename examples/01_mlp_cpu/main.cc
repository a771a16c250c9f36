// 01_mlp_cpu: a two-layer MLP trained data-parallel on CPU to imitate a fixed
// random teacher network. Each rank takes its slice of a global batch; rtd::DDP
// averages the gradients (layer 2's bucket is reduced while layer 1's gradient
// is computed), so N ranks with batch B follow the same loss curve as one rank
// with batch N*B. With --shard zero1|zero2|zero3|hybrid, rtd::FSDP shards the
// weights and AdamW's state instead (each layer a unit) and steps AdamW with
// --lr; --optim adamw gives DDP the same AdamW, so that checkpoints of either
// resume in the other. --offload moves FSDP's optimizer states to the host's
// AdamW thread (or a file: nvme), --delayed-update 1 steps with the weights of
// the step before last (its effect on this loss curve is shown in
// 411ccc3:docs/benchmarks.md). Uses only the public API.
#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rt_dist/rt_dist.h"

namespace {

struct Flags {
  int steps = 100;
  int batch = 32;        // per rank
  int global_batch = 0;  // > 0: the batch per rank is this / world size (elastic jobs)
  int pace_ms = 0;       // a pause per step, to stand in for a longer step
  int in = 32, hidden = 64, out = 8;
  float lr = 0.1f;
  int log_every = 10;
  std::string shard;                           // empty: DDP, with SGD or (--optim adamw) AdamW
  rtd::Offload offload = rtd::Offload::kNone;  // with --shard
  std::string offload_dir;
  bool update_in_backward = false, delayed_update = false;
  bool adamw = false;
  // Checkpoints (DDP): saved every ckpt_every steps into ckpt_dir, and the
  // latest valid one resumed from at start, whatever the world size.
  std::string ckpt_dir;
  int ckpt_every = 0;
  bool ckpt_async = false;  // save in the background while training goes on
  // A test's fault: the last rank SIGKILLs itself there, in the job's first
  // attempt only (not after a restart, nor as a replacement worker).
  int kill_at_step = 0;
  // DDP: recover in process (rtd::Recovery) when dtrun --recovery=in-process
  // starts a lost worker again: the others keep their processes.
  bool recover = false;
  // Inputs from shard files through rtd::data::Loader (--data DIR), written
  // first by --make-data DIR --records N; else generated from (step, row).
  std::string data_dir, make_data;
  long long records = 4096;
};

Flags parse_flags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value for %s\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--steps")
      f.steps = std::atoi(value());
    else if (a == "--batch")
      f.batch = std::atoi(value());
    else if (a == "--global-batch")
      f.global_batch = std::atoi(value());
    else if (a == "--pace-ms")
      f.pace_ms = std::atoi(value());
    else if (a == "--hidden")
      f.hidden = std::atoi(value());
    else if (a == "--lr")
      f.lr = static_cast<float>(std::atof(value()));
    else if (a == "--log-every")
      f.log_every = std::atoi(value());
    else if (a == "--shard")
      f.shard = value();
    else if (a == "--offload") {
      const std::string v = value();
      if (!rtd::parse_offload(v, &f.offload)) {
        std::fprintf(stderr, "--offload takes none, optimizer, params or nvme, not '%s'\n",
                     v.c_str());
        std::exit(2);
      }
    } else if (a == "--offload-dir")
      f.offload_dir = value();
    else if (a == "--update-in-backward")
      f.update_in_backward = std::atoi(value()) != 0;
    else if (a == "--delayed-update")
      f.delayed_update = std::atoi(value()) != 0;
    else if (a == "--optim") {
      const std::string v = value();
      if (v != "sgd" && v != "adamw") {
        std::fprintf(stderr, "--optim takes sgd or adamw, not '%s'\n", v.c_str());
        std::exit(2);
      }
      f.adamw = v == "adamw";
    } else if (a == "--ckpt-dir")
      f.ckpt_dir = value();
    else if (a == "--ckpt-every")
      f.ckpt_every = std::atoi(value());
    else if (a == "--ckpt-async")
      f.ckpt_async = std::atoi(value()) != 0;
    else if (a == "--data")
      f.data_dir = value();
    else if (a == "--make-data")
      f.make_data = value();
    else if (a == "--records")
      f.records = std::atoll(value());
    else if (a == "--kill-at-step")
      f.kill_at_step = std::atoi(value());
    else if (a == "--recover")
      f.recover = std::atoi(value()) != 0;
    else {
      std::fprintf(stderr,
                   "usage: mlp_cpu [--steps N] [--batch B] [--hidden H] [--lr LR] "
                   "[--global-batch G] [--pace-ms MS] [--log-every K] "
                   "[--shard zero1|zero2|zero3|hybrid [--offload optimizer|params|nvme "
                   "[--offload-dir DIR] [--update-in-backward 1] [--delayed-update 1]] | "
                   "--optim sgd|adamw] [--ckpt-dir DIR "
                   "--ckpt-every K [--ckpt-async 1]] [--data DIR | --make-data DIR --records N] "
                   "[--kill-at-step S] [--recover 1]\nunknown argument %s\n",
                   a.c_str());
      std::exit(2);
    }
  }
  rtd::ShardStrategy strategy;
  if (!f.shard.empty() && !rtd::parse_shard_strategy(f.shard, &strategy)) {
    std::fprintf(stderr, "--shard takes zero1, zero2, zero3 or hybrid, not '%s'\n",
                 f.shard.c_str());
    std::exit(2);
  }
  if (f.shard.empty() &&
      (f.offload != rtd::Offload::kNone || f.update_in_backward || f.delayed_update)) {
    std::fprintf(stderr, "--offload, --update-in-backward and --delayed-update need --shard\n");
    std::exit(2);
  }
  if (f.recover && (!f.shard.empty() || !f.data_dir.empty() || f.ckpt_async)) {
    std::fprintf(stderr,
                 "--recover 1 recovers DDP's replicated state: it does not take --shard (a "
                 "ZeRO shard exists on one rank only: restart from a checkpoint), --data or "
                 "--ckpt-async\n");
    std::exit(2);
  }
  if (f.ckpt_every < 0 || (f.ckpt_every > 0 && f.ckpt_dir.empty())) {
    std::fprintf(stderr, "--ckpt-every needs --ckpt-dir and a positive number of steps\n");
    std::exit(2);
  }
  if (f.steps < 1 || f.batch < 1 || f.hidden < 1 || f.log_every < 1) {
    std::fprintf(stderr, "steps, batch, hidden and log-every must be positive\n");
    std::exit(2);
  }
  return f;
}

// The same global batch in every world (an elastic job's rounds, a world
// that shrank in process): f.batch per rank; false (said) when it does not split.
bool split_batch(Flags& f, int world) {
  if (f.global_batch <= 0) return true;
  if (f.global_batch % world != 0) {
    std::fprintf(stderr, "mlp_cpu: --global-batch %d does not split over %d ranks\n",
                 f.global_batch, world);
    return false;
  }
  f.batch = f.global_batch / world;
  return true;
}

// Wall-clock milliseconds: comparable across the processes of one host.
long long wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A counter-based generator: the value at (stream, index) does not depend on
// which rank asks, so every world size sees the same global batch.
float uniform(std::uint64_t stream, std::uint64_t index) {
  std::uint64_t z = stream * 0x9E3779B97F4A7C15ull + index + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) / static_cast<float>(1ull << 24) * 2.0f - 1.0f;
}

void fill(std::vector<float>& w, std::uint64_t stream, float scale) {
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = scale * uniform(stream, i);
}

// C (m x n) = A (m x k) * B^T (n x k), row-major.
void gemm_abt(int m, int n, int k, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
}
// C (m x n) = A^T * B, with A (k x m) and B (k x n), row-major.
void gemm_atb(int m, int n, int k, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, n, k, 1.0f, a, m, b, n, 0.0f, c, n);
}
// C (m x n) = A (m x k) * B (k x n), row-major.
void gemm_ab(int m, int n, int k, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
}

struct Mlp {
  int in, hidden, out;
  std::vector<float> w1, w2;  // hidden x in, out x hidden
  // AdamW's moments of w1 and w2 (DDP with --optim adamw; sized then).
  std::vector<float> m1, v1, m2, v2;

  // y = W2 tanh(W1 x) for each row of x (rows x in); keeps the activations in act.
  void forward(int rows, const float* x, std::vector<float>& act, std::vector<float>& y) const {
    act.resize(static_cast<std::size_t>(rows) * hidden);
    y.resize(static_cast<std::size_t>(rows) * out);
    gemm_abt(rows, hidden, in, x, w1.data(), act.data());
    for (auto& a : act) a = std::tanh(a);
    gemm_abt(rows, out, hidden, act.data(), w2.data(), y.data());
  }
};

// The student's weights (and AdamW's moments, when it has them) as checkpoint
// tensors, named as FSDP names its own: each rank saves its slice of the
// replica (all ranks write, none twice), and loads all of it.
rtd::ckpt::State model_state(Mlp& m, int rank, int world, bool whole) {
  rtd::ckpt::State s;
  auto tensor = [&](const std::string& name, std::vector<float>& w, std::int64_t rows_,
                    std::int64_t cols) {
    const std::size_t n = w.size();
    const std::size_t lo = whole ? 0 : n * rank / world, hi = whole ? n : n * (rank + 1) / world;
    s.tensors.push_back(rtd::ckpt::Tensor{
        name, rtd::DType::kFloat32, {rows_, cols}, {{lo, hi - lo, w.data() + lo}}});
  };
  tensor("w1", m.w1, m.hidden, m.in);
  tensor("w2", m.w2, m.out, m.hidden);
  if (!m.m1.empty()) {
    tensor("w1.exp_avg", m.m1, m.hidden, m.in);
    tensor("w1.exp_avg_sq", m.v1, m.hidden, m.in);
    tensor("w2.exp_avg", m.m2, m.out, m.hidden);
    tensor("w2.exp_avg_sq", m.v2, m.out, m.hidden);
  }
  return s;
}

// AdamW without weight decay, as FSDP steps it (step counts from 1).
void adamw(std::vector<float>& w, const float* g, std::vector<float>& m, std::vector<float>& v,
           float lr, int step) {
  const float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  const float bc1 = 1.0f - std::pow(beta1, static_cast<float>(step));
  const float bc2 = 1.0f - std::pow(beta2, static_cast<float>(step));
  for (std::size_t j = 0; j < w.size(); ++j) {
    m[j] = beta1 * m[j] + (1.0f - beta1) * g[j];
    v[j] = beta2 * v[j] + (1.0f - beta2) * g[j] * g[j];
    w[j] -= lr * (m[j] / bc1) / (std::sqrt(v[j] / bc2) + eps);
  }
}

// FNV-1a over the weights' bytes: equal runs print equal values, bit for bit.
unsigned long long weights_hash(const Mlp& m) {
  unsigned long long h = 1469598103934665603ull;
  for (const auto* w : {&m.w1, &m.w2}) {
    const auto* p = reinterpret_cast<const unsigned char*>(w->data());
    for (std::size_t i = 0; i < w->size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

// Synthetic inputs in shard files: 4 files of records of f.in floats.
int make_data(const Flags& f) {
  std::filesystem::create_directories(f.make_data);
  const long long per_file = (f.records + 3) / 4;
  for (int file = 0; file < 4; ++file) {
    const long long first = per_file * file;
    const long long n = std::max(0LL, std::min(per_file, f.records - first));
    const std::string path = f.make_data + "/shard_" + std::to_string(file) + ".bin";
    rtd::data::write_shard(path, sizeof(float) * f.in, static_cast<std::uint64_t>(n),
                           [&](std::uint64_t i, unsigned char* out) {
                             for (int c = 0; c < f.in; ++c) {
                               const float v = uniform(7, (first + i) * f.in + c);
                               std::memcpy(out + c * sizeof(float), &v, sizeof(float));
                             }
                           });
  }
  std::printf("wrote %lld records of %d floats to %s\n", f.records, f.in, f.make_data.c_str());
  return 0;
}

std::unique_ptr<rtd::data::Loader> open_data(const Flags& f, int rank, int world) {
  if (f.data_dir.empty()) return nullptr;
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(f.data_dir)) {
    if (entry.path().extension() == ".bin") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return std::make_unique<rtd::data::Loader>(
      rtd::data::LoaderOptions{.files = files,
                               .record_bytes = sizeof(float) * f.in,
                               .batch_per_rank = f.batch,
                               .rank = rank,
                               .world_size = world,
                               .seed = 11});
}

// This rank's rows of the global batch of world * rows samples at a step:
// from the loader when there is one, else generated.
void batch_of(const Flags& f, int rank, int step, std::vector<float>& x,
              rtd::data::Loader* loader = nullptr) {
  if (loader) {
    std::memcpy(x.data(), loader->next(), x.size() * sizeof(float));
    return;
  }
  for (int r = 0; r < f.batch; ++r) {
    std::uint64_t global_row = static_cast<std::uint64_t>(rank) * f.batch + r;
    for (int c = 0; c < f.in; ++c) x[r * f.in + c] = uniform(1000 + step, global_row * f.in + c);
  }
}

// Mean squared error against the teacher; dy its gradient.
float loss_and_grad(const std::vector<float>& y, const std::vector<float>& target,
                    std::vector<float>& dy, int rows, int out) {
  float loss = 0.0f;
  const float norm = 1.0f / static_cast<float>(rows * out);
  for (std::size_t i = 0; i < y.size(); ++i) {
    float d = y[i] - target[i];
    loss += d * d * norm;
    dy[i] = 2.0f * d * norm;
  }
  return loss;
}

// The same model with its weights and AdamW state sharded by rtd::FSDP: each
// layer is a unit, copied out of the engine for forward and backward.
int train_sharded(rtd::Context& ctx, const Flags& f, const Mlp& teacher, Mlp student) {
  rtd::FSDPOptions options;
  rtd::parse_shard_strategy(f.shard, &options.strategy);
  options.adamw.lr = f.lr;
  options.adamw.weight_decay = 0.0f;
  options.offload = f.offload;
  options.offload_dir = f.offload_dir;
  options.update_in_backward = f.update_in_backward;
  options.delayed_update = f.delayed_update;
  rtd::FSDP fsdp(ctx,
                 {{rtd::view(student.w1.data(), student.w1.size())},
                  {rtd::view(student.w2.data(), student.w2.size())}},
                 options);
  if (ctx.rank() == 0) std::printf("%s\n", fsdp.describe().c_str());
  auto fetch = [&](int unit, std::vector<float>& w) {
    rtd::BufferView p = fsdp.param(unit, 0);
    std::memcpy(w.data(), p.data, p.bytes());
  };
  const int rows = f.batch;
  std::vector<float> x(rows * f.in), target, act, teacher_act, y;
  std::vector<float> dy(rows * f.out), da(rows * f.hidden);
  // Checkpoints: the engine's shards (weights and AdamW's moments) as each
  // rank holds them; any strategy and world size loads them.
  const std::vector<std::vector<rtd::ckpt::Tensor>> names = {
      {{"w1", rtd::DType::kFloat32, {f.hidden, f.in}, {}}},
      {{"w2", rtd::DType::kFloat32, {f.out, f.hidden}, {}}}};
  int first_step = 1;
  std::unique_ptr<rtd::ckpt::Checkpointer> ckpt;
  std::unique_ptr<rtd::data::Loader> loader;
  try {
    loader = open_data(f, ctx.rank(), ctx.world_size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlp_cpu: %s\n", e.what());
    return 1;
  }
  if (!f.ckpt_dir.empty()) {
    ckpt = std::make_unique<rtd::ckpt::Checkpointer>(
        ctx.store(), ctx.rank(), ctx.world_size(),
        rtd::ckpt::Options{.dir = f.ckpt_dir, .keep_last = 2});
    rtd::ckpt::State state = fsdp.checkpoint_state(names, false);
    try {
      if (auto step = ckpt->load(state)) {
        fsdp.after_load(state);
        if (loader && state.meta.count("data_position"))
          loader->set_position(state.meta["data_position"]);
        first_step = static_cast<int>(*step) + 1;
        if (ctx.rank() == 0) std::printf("resumed from step %lld\n", static_cast<long long>(*step));
      }
    } catch (const rtd::Error& e) {
      std::fprintf(stderr, "mlp_cpu: %s\n", e.what());
      return 1;
    }
  }
  for (int step = first_step; step <= f.steps; ++step) {
    batch_of(f, ctx.rank(), step, x, loader.get());
    teacher.forward(rows, x.data(), teacher_act, target);
    for (int u = 0; u < 2; ++u) {
      fsdp.pre_forward(u);
      fetch(u, u == 0 ? student.w1 : student.w2);
      fsdp.post_forward(u);
    }
    student.forward(rows, x.data(), act, y);
    float loss = loss_and_grad(y, target, dy, rows, f.out);
    fsdp.pre_backward(1);
    gemm_atb(f.out, f.hidden, rows, dy.data(), act.data(),
             static_cast<float*>(fsdp.grad(1, 0).data));
    fsdp.post_backward(1);
    fsdp.pre_backward(0);
    gemm_ab(rows, f.hidden, f.out, dy.data(), student.w2.data(), da.data());
    for (std::size_t i = 0; i < da.size(); ++i) da[i] *= 1.0f - act[i] * act[i];
    gemm_atb(f.hidden, f.in, rows, da.data(), x.data(), static_cast<float*>(fsdp.grad(0, 0).data));
    fsdp.post_backward(0);
    fsdp.step();
    ctx.comm().all_reduce(rtd::view(&loss, 1), rtd::ReduceOp::kAvg)->wait();
    if (f.pace_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(f.pace_ms));
    if (ctx.rank() == 0 && (step % f.log_every == 0 || step == 1 || step == f.steps)) {
      std::printf("step %d loss %.8e\n", step, loss);
      std::fflush(stdout);
    }
    if (ckpt && f.ckpt_every > 0 && step % f.ckpt_every == 0) {
      rtd::ckpt::State state = fsdp.checkpoint_state(names, true);
      if (loader) state.meta["data_position"] = loader->position();
      ckpt->save(step, state);
    }
  }
  ctx.comm().barrier()->wait();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f = parse_flags(argc, argv);
  if (!f.make_data.empty()) {
    try {
      return make_data(f);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mlp_cpu: %s\n", e.what());
      return 1;
    }
  }
  std::shared_ptr<rtd::Context> ctx;
  try {
    ctx = rtd::init({.backend = rtd::Backend::kGloo});
  } catch (const rtd::Error& e) {
    std::fprintf(stderr, "mlp_cpu: %s\n", e.what());
    return 1;
  }
  int rank = ctx->rank(), world = ctx->world_size();
  if (!split_batch(f, world)) return 2;
  if (rank == 0 && !f.ckpt_dir.empty())
    std::printf("world size %d, %d samples per rank\n", world, f.batch);
  if (ctx->comm().backend() == "nccl") {
    std::fprintf(stderr,
                 "mlp_cpu trains on the CPU: run it with RTD_BACKEND=gloo (or mpi under mpirun), "
                 "or without a GPU\n");
    return 2;
  }
  int rows = f.batch;

  Mlp teacher{f.in, f.hidden, f.out, std::vector<float>(f.hidden * f.in),
              std::vector<float>(f.out * f.hidden)};
  fill(teacher.w1, 1, 1.0f);
  fill(teacher.w2, 2, 1.0f);
  Mlp student = teacher;
  fill(student.w1, 3, 0.3f);
  fill(student.w2, 4, 0.3f);
  if (!f.shard.empty()) {
    try {
      return train_sharded(*ctx, f, teacher, student);
    } catch (const rtd::Error& e) {  // options the engine refuses, a full disk
      std::fprintf(stderr, "mlp_cpu: %s\n", e.what());
      return 1;
    }
  }
  if (f.adamw) {
    student.m1.assign(student.w1.size(), 0.0f);
    student.v1.assign(student.w1.size(), 0.0f);
    student.m2.assign(student.w2.size(), 0.0f);
    student.v2.assign(student.w2.size(), 0.0f);
  }
  // DDP broadcasts rank 0's initial weights and owns the gradient buffers;
  // small buckets so that each layer's gradient is a bucket of its own. It
  // is built again after an in-process recovery (on the new communicator).
  rtd::Recovery recovery(*ctx);
  auto make_ddp = [&] {
    return std::make_unique<rtd::DDP>(
        ctx->comm(), recovery.store(),
        std::vector<rtd::BufferView>{rtd::view(student.w1.data(), student.w1.size()),
                                     rtd::view(student.w2.data(), student.w2.size())},
        rtd::DDPOptions{.bucket_mb = 0.001, .first_bucket_mb = 0.001});
  };
  std::unique_ptr<rtd::DDP> ddp;
  float *g1 = nullptr, *g2 = nullptr;

  std::vector<float> x(rows * f.in), target, act, teacher_act, y;
  std::vector<float> dy(rows * f.out), da(rows * f.hidden);
  auto t0 = std::chrono::steady_clock::now();
  int window_steps = 0;
  double comm_wait_s = 0;

  // Resume from the latest valid checkpoint, saved by any number of ranks,
  // and the data where it was.
  int first_step = 1;
  std::int64_t adamw_steps = 0;
  std::unique_ptr<rtd::ckpt::Checkpointer> ckpt;
  std::unique_ptr<rtd::data::Loader> loader;
  try {
    loader = open_data(f, rank, world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlp_cpu: %s\n", e.what());
    return 1;
  }
  if (!f.ckpt_dir.empty()) {
    ckpt = std::make_unique<rtd::ckpt::Checkpointer>(
        ctx->store(), rank, world, rtd::ckpt::Options{.dir = f.ckpt_dir, .keep_last = 2});
    rtd::ckpt::State state = model_state(student, rank, world, true);
    try {
      if (auto step = ckpt->load(state)) {
        if (loader && state.meta.count("data_position"))
          loader->set_position(state.meta["data_position"]);
        if (state.meta.count("fsdp.steps")) adamw_steps = std::stoll(state.meta["fsdp.steps"]);
        first_step = static_cast<int>(*step) + 1;
        if (rank == 0) std::printf("resumed from step %lld\n", static_cast<long long>(*step));
      }
    } catch (const rtd::Error& e) {
      std::fprintf(stderr, "mlp_cpu: %s\n", e.what());
      return 1;
    }
  }
  const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const bool first_attempt =
      (restarts == nullptr || std::string(restarts) == "0") && !recovery.replacement();

  // What a replacement worker receives from a survivor: the weights, AdamW's
  // moments and its step count, and the last step completed.
  std::vector<rtd::BufferView> replicated = {rtd::view(student.w1.data(), student.w1.size()),
                                             rtd::view(student.w2.data(), student.w2.size())};
  if (f.adamw) {
    for (auto* m : {&student.m1, &student.v1, &student.m2, &student.v2})
      replicated.push_back(rtd::view(m->data(), m->size()));
  }
  replicated.push_back(rtd::view(&adamw_steps, 1));
  std::int64_t done = first_step - 1;
  if (f.recover) {
    std::printf("rank %d pid %d generation %d\n", rank, static_cast<int>(getpid()),
                recovery.generation());
    std::fflush(stdout);
    recovery.enable();  // dtrun may now start a lost worker again instead of failing the round
  }
  if (recovery.replacement()) {
    const int source = recovery.sync(replicated, &done);
    std::printf("rank %d joined generation %d, the state from rank %d: resuming after step %lld\n",
                rank, recovery.generation(), source, static_cast<long long>(done));
    std::fflush(stdout);
  }
  ddp = make_ddp();
  g1 = static_cast<float*>(ddp->grad(0).data);
  g2 = static_cast<float*>(ddp->grad(1).data);

  bool resumed = done > 0;
  for (int step = static_cast<int>(done) + 1; step <= f.steps; ++step) {
    try {
      // A node joined the job: dtrun moved this worker to the next round
      // (the same way out as a failure's).
      if (f.recover && recovery.should_move())
        throw rtd::Error(rtd::ErrorCategory::kBackend, "a node joined the job");
      if (!f.ckpt_async && step == f.kill_at_step && first_attempt && rank == world - 1) {
        std::printf("rank %d kills itself at step %d at %lld ms\n", rank, step, wall_ms());
        std::fflush(stdout);
        raise(SIGKILL);
      }
      batch_of(f, rank, step, x, loader.get());
      teacher.forward(rows, x.data(), teacher_act, target);
      rtd::trace::Scope step_scope("step");
      {
        rtd::trace::Scope scope("forward");
        student.forward(rows, x.data(), act, y);
      }

      float loss = 0.0f;
      const float norm = 1.0f / static_cast<float>(rows * f.out);
      for (std::size_t i = 0; i < y.size(); ++i) {
        float d = y[i] - target[i];
        loss += d * d * norm;
        dy[i] = 2.0f * d * norm;
      }
      // Backward, layer 2 first; its bucket is reduced while layer 1's gradient is computed.
      gemm_atb(f.out, f.hidden, rows, dy.data(), act.data(), g2);
      ddp->grad_ready(1);
      gemm_ab(rows, f.hidden, f.out, dy.data(), student.w2.data(), da.data());
      for (std::size_t i = 0; i < da.size(); ++i) da[i] *= 1.0f - act[i] * act[i];
      gemm_atb(f.hidden, f.in, rows, da.data(), x.data(), g1);
      ddp->grad_ready(0);
      const auto waited = std::chrono::steady_clock::now();  // the reductions not yet hidden
      ddp->finish();
      ctx->comm().all_reduce(rtd::view(&loss, 1), rtd::ReduceOp::kAvg)->wait();
      comm_wait_s +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - waited).count();
      if (f.pace_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(f.pace_ms));

      if (f.adamw) {
        ++adamw_steps;
        adamw(student.w1, g1, student.m1, student.v1, f.lr, static_cast<int>(adamw_steps));
        adamw(student.w2, g2, student.m2, student.v2, f.lr, static_cast<int>(adamw_steps));
      } else {
        for (std::size_t i = 0; i < student.w1.size(); ++i) student.w1[i] -= f.lr * g1[i];
        for (std::size_t i = 0; i < student.w2.size(); ++i) student.w2[i] -= f.lr * g2[i];
      }
      done = step;
      // The first step completed after a resume (a checkpoint, a recovery):
      // when, for bench/recovery_time.sh.
      if (resumed && rank == 0) {
        std::printf("step %d completed after the resume at %lld ms\n", step, wall_ms());
        std::fflush(stdout);
      }
      resumed = false;

      ++window_steps;
      if (step % f.log_every == 0 || step == 1 || step == f.steps) {
        // Over the steps since the last line: samples/s, step time, and the
        // time the step waited for communication.
        const auto now = std::chrono::steady_clock::now();
        const double secs = std::chrono::duration<double>(now - t0).count();
        if (rank == 0) {
          std::printf("step %d loss %.8e samples/s %.0f step_ms %.3f comm_wait_ms %.3f\n", step,
                      loss, static_cast<double>(window_steps) * rows * world / secs,
                      1e3 * secs / window_steps, 1e3 * comm_wait_s / window_steps);
          std::fflush(stdout);
        }
        t0 = now;
        window_steps = 0;
        comm_wait_s = 0;
      }
      if (ckpt && f.ckpt_every > 0 && step % f.ckpt_every == 0) {
        rtd::ckpt::State state = model_state(student, rank, world, false);
        if (loader) state.meta["data_position"] = loader->position();
        if (f.adamw) state.meta["fsdp.steps"] = std::to_string(adamw_steps);  // FSDP's key
        if (f.ckpt_async) {
          ckpt->save_async(step, state);
          // A fault in the middle of the background write: the last rank dies
          // before its part is written; the checkpoint before must stay whole.
          if (step == f.kill_at_step && first_attempt && rank == world - 1) raise(SIGKILL);
        } else {
          ckpt->save(step, state);
        }
      }
    } catch (const rtd::Error& e) {
      // A peer was lost in this step: with dtrun --recovery=in-process, a
      // replacement comes; every rank then takes the state of the lowest
      // surviving rank and goes on after the last step it completed.
      if (!f.recover) throw;
      std::fprintf(stderr, "rank %d: step %d: %s; recovering\n", rank, step, e.what());
      const auto lost = std::chrono::steady_clock::now();
      if (!recovery.recover([&] { ddp.reset(); })) throw;
      const int source = recovery.sync(replicated, &done);
      if (ctx->world_size() != world || ctx->rank() != rank) {
        // A node was lost: this worker moved to the next round with a new
        // rank and world size; the same global batch is split anew.
        rank = ctx->rank();
        world = ctx->world_size();
        if (!split_batch(f, world)) return 2;
        rows = f.batch;
        x.assign(static_cast<std::size_t>(rows) * f.in, 0.0f);
        dy.assign(static_cast<std::size_t>(rows) * f.out, 0.0f);
        da.assign(static_cast<std::size_t>(rows) * f.hidden, 0.0f);
        if (ckpt)
          ckpt = std::make_unique<rtd::ckpt::Checkpointer>(
              ctx->store(), rank, world, rtd::ckpt::Options{.dir = f.ckpt_dir, .keep_last = 2});
        if (rank == 0) std::printf("world size %d, %d samples per rank\n", world, f.batch);
      }
      ddp = make_ddp();
      g1 = static_cast<float*>(ddp->grad(0).data);
      g2 = static_cast<float*>(ddp->grad(1).data);
      std::printf(
          "rank %d recovered in generation %d in %.0f ms, the state from rank %d: "
          "resuming after step %lld\n",
          rank, recovery.generation(),
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - lost)
              .count(),
          source, static_cast<long long>(done));
      std::fflush(stdout);
      step = static_cast<int>(done);
      resumed = true;
    }
  }
  if (ckpt) ckpt->wait();
  ctx->comm().barrier()->wait();
  if (rank == 0) std::printf("final weights fnv1a %016llx\n", weights_hash(student));
  return 0;
}
