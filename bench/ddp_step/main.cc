// ddp_step: the step time of the reference MLP on one GPU with no
// communication, then with rtd::DDP for each gradient dtype x bucket size x
// reduction dtype x optimizer placement (after all buckets as PyTorch, or per layer as each
// bucket lands: "DDP+opt");
// scaling efficiency (one-GPU step / DDP step), exposed communication (the
// difference), memory, and each rank's energy per step, mean power and SM
// clock (through NVML, where present); with --shard, rtd::FSDP's strategies
// too, with the memory the model states take by the ZeRO arithmetic. Rank 0
// prints a table and JSON. Run under dtrun:
//   dtrun --nproc-per-node=2 ddp_step --bucket-mb 25,100,250 --reduce fp32,bf16
//   dtrun --nproc-per-node=2 ddp_step --overlap-optimizer 1 --shard zero1,zero2,zero3
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/common/gpu_power.h"
#include "bench/common/step_timing.h"
#include "examples/02_mlp_gpu/model.h"
#include "examples/02_mlp_gpu/sharded.h"
#include "rt_dist/rt_dist.h"

namespace {

using rtd::bench::device_used_gib;
using rtd::bench::json_number;
using rtd::bench::PhaseEvents;
using rtd::bench::split;
using rtd::bench::time_steps;

struct Result {
  std::string mode;
  std::string grads =
      "fp32";  // weight-gradient dtype (bf16: written by the product, read by AdamW)
  double bucket_mb = 0;
  std::string reduce;
  bool registered = false;
  std::string method = "-";  // how the buckets were reduced: copy engines or all_reduce
  int backward_sms = 0;      // SMs backward's products were planned for (0: all)
  double step_ms = 0;
  // Per phase on the trainer's stream (CUDA events, mean over the timed steps):
  // forward; backward (slower than on one GPU when the reduction running beside
  // it slows its kernels); after backward (waiting for the last buckets, and the optimizer).
  double forward_ms = 0, backward_ms = 0, after_ms = 0;
  // This rank's GPU over the timed steps (NaN without NVML): energy per step,
  // mean power, mean SM clock.
  double joules = 0, watts = 0, sm_mhz = 0;
  double model_gib = 0;   // what the model and DDP (or FSDP) allocated
  double states_gib = 0;  // the model states by the ZeRO arithmetic (0: not a sharded row)
  double device_gib = 0;  // device memory in use (cudaMemGetInfo): adds NCCL, cuBLAS, the context
  int skipped = 0;        // float16: steps the loss scale skipped (an overflow)
  float loss_scale = 0;   // float16: the scale at the end
};

// float16 rows: the mode says so, and their efficiency is against the
// one-GPU float16 step.
std::string precision_suffix(const mlp::MlpConfig& c) { return c.fp16 ? "/fp16" : ""; }
std::string precision_suffix(const Result& r) { return r.mode.ends_with("/fp16") ? "/fp16" : ""; }
// The one-GPU float16 step scales its loss by a fixed 2^16, as AMP starts.
constexpr float kFp16Scale = 65536.0f;

Result run_single(const mlp::MlpConfig& c, int warmup, int steps, cudaStream_t s,
                  rtd::bench::GpuPower& power) {
  mlp::Model model(c, s);
  const std::size_t grad_bytes = model.layer_elems() * c.layers * model.grad_elem_bytes();
  char* grads = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&grads), grad_bytes);
  auto grad = [&](int l) { return grads + l * model.layer_elems() * model.grad_elem_bytes(); };
  PhaseEvents phases(warmup + steps, s);
  Result r{.mode = "one GPU" + precision_suffix(c),
           .grads = c.half_grads ? (c.fp16 ? "fp16" : "bf16") : "fp32",
           .reduce = "-"};
  if (c.fp16) model.set_loss_scale(kFp16Scale);
  time_steps(
      [&](int i) {
        phases.mark(i, PhaseEvents::kStart);
        model.forward(s);
        phases.mark(i, PhaseEvents::kForward);
        model.backward(
            grad, [](int) {}, s);
        phases.mark(i, PhaseEvents::kBackward);
        model.optimizer_step(grad, i, s);
        phases.mark(i, PhaseEvents::kEnd);
      },
      warmup, steps, s, power, r);
  phases.fill(r, warmup, steps);
  r.model_gib = static_cast<double>(model.bytes() + grad_bytes) / (1 << 30);
  r.device_gib = device_used_gib();
  cudaFree(grads);
  return r;
}

// One DDP configuration. overlap: "0" optimizer after all buckets, "1" per
// layer as buckets land, "serial" no overlap at all (every bucket starts after
// backward): the difference to the one-GPU step is then the whole
// communication time; "comm" the buckets' reduction alone, no model (its time
// and energy).
struct DdpRun {
  bool half_grads = false;
  bool copy_engines = true;
  int backward_sms = 0;
  bool register_buckets = false;
  std::string overlap = "1";
  std::string reduce = "fp32";
  double bucket_mb = 25;
};

// Every combination of the flags' values, the last list varying fastest:
// grads, copy engines, backward SMs, registered buckets, overlap, reduce, bucket.
std::vector<DdpRun> ddp_runs(const std::vector<std::vector<std::string>>& lists) {
  std::size_t total = 1;
  for (const auto& l : lists) total *= l.size();
  std::vector<DdpRun> runs;
  for (std::size_t n = 0; n < total; ++n) {
    std::vector<std::string> pick(lists.size());
    std::size_t rest = n;
    for (std::size_t i = lists.size(); i-- > 0;) {
      pick[i] = lists[i][rest % lists[i].size()];
      rest /= lists[i].size();
    }
    runs.push_back(DdpRun{.half_grads = pick[0] == "bf16",
                          .copy_engines = pick[1] == "1",
                          .backward_sms = std::stoi(pick[2]),
                          .register_buckets = pick[3] == "1",
                          .overlap = pick[4],
                          .reduce = pick[5],
                          .bucket_mb = std::stod(pick[6])});
  }
  return runs;
}

Result run_ddp(rtd::Context& ctx, mlp::MlpConfig c, const DdpRun& run, int warmup, int steps,
               cudaStream_t s, rtd::bench::GpuPower& power) {
  c.half_grads = run.half_grads;
  const std::string& overlap = run.overlap;
  const std::string& reduce = run.reduce;
  const bool overlap_optimizer = overlap == "1", serial = overlap == "serial",
             comm_only = overlap == "comm";
  mlp::Model model(c, s);
  model.set_backward_sm_count(run.backward_sms);
  std::vector<rtd::BufferView> params;
  for (int l = 0; l < c.layers; ++l) {
    params.push_back({model.master(l), model.layer_elems(), rtd::DType::kFloat32,
                      rtd::DeviceType::kCuda, ctx.local_rank()});
  }
  cudaStreamSynchronize(s);
  rtd::DDP ddp(ctx, params,
               {.bucket_mb = run.bucket_mb,
                .grad_dtype = c.half_grads ? rtd::DType::kBFloat16 : rtd::DType::kFloat32,
                .reduce_dtype = reduce == "bf16" ? rtd::DType::kBFloat16 : rtd::DType::kFloat32,
                .register_buckets = run.register_buckets,
                .copy_engines = run.copy_engines});
  cudaDeviceSynchronize();  // DDP broadcast rank 0's weights on the default stream
  model.refresh_weights(s);
  rtd::StreamRef ref{s};
  auto grad = [&](int l) { return ddp.grad(l).data; };
  PhaseEvents phases(warmup + steps, s);
  Result r{
      .mode = overlap_optimizer ? "DDP+opt" : (serial ? "serial" : (comm_only ? "comm" : "DDP")),
      .grads = c.half_grads ? "bf16" : "fp32",
      .bucket_mb = run.bucket_mb,
      .reduce = reduce,
      .registered = ddp.buckets_registered(),
      .method = ddp.reduce_method(),
      .backward_sms = run.backward_sms};
  time_steps(
      [&](int i) {
        phases.mark(i, PhaseEvents::kStart);
        if (comm_only) {
          phases.mark(i, PhaseEvents::kForward);
          phases.mark(i, PhaseEvents::kBackward);
          for (int l = c.layers - 1; l >= 0; --l) ddp.grad_ready(l, ref);
          ddp.finish(ref);
          phases.mark(i, PhaseEvents::kEnd);
          return;
        }
        model.forward(s);
        phases.mark(i, PhaseEvents::kForward);
        model.backward(
            grad,
            [&](int l) {
              if (!serial) ddp.grad_ready(l, ref);
            },
            s);
        phases.mark(i, PhaseEvents::kBackward);
        if (serial) {
          for (int l = c.layers - 1; l >= 0; --l) ddp.grad_ready(l, ref);
        }
        if (overlap_optimizer) {  // each layer's update as soon as its bucket is reduced
          for (int l = c.layers - 1; l >= 0; --l) {
            ddp.wait_grad(l, ref);
            model.optimizer_step_layer(l, grad(l), i, s);
          }
          ddp.finish(ref);
        } else {  // as PyTorch's DDP: the optimizer after every bucket
          ddp.finish(ref);
          model.optimizer_step(grad, i, s);
        }
        phases.mark(i, PhaseEvents::kEnd);
      },
      warmup, steps, s, power, r);
  std::size_t bucket_bytes = 0;
  const bool cast_wire = (reduce == "bf16") != c.half_grads;  // a wire copy beside the buckets
  for (int b = 0; b < ddp.bucket_count(); ++b) {
    const std::size_t elems = ddp.bucket_bytes(b) / model.grad_elem_bytes();
    bucket_bytes += ddp.bucket_bytes(b) + (cast_wire ? elems * (reduce == "bf16" ? 2 : 4) : 0);
  }
  phases.fill(r, warmup, steps);
  r.model_gib = static_cast<double>(model.bytes() + bucket_bytes) / (1 << 30);
  r.device_gib = device_used_gib();
  return r;
}

// One sharded configuration: "zero1", "zero2", "zero3", "zero3-keep" (no
// reshard after forward) or "hybrid"; bf16 weights gathered from fp32 master
// shards, gradients written and reduced in `reduce`, one unit per layer.
Result run_fsdp(rtd::Context& ctx, mlp::MlpConfig c, const std::string& shard,
                const std::string& reduce, bool copy_engines, bool update_in_backward, int warmup,
                int steps, cudaStream_t s, rtd::bench::GpuPower& power) {
  rtd::FSDPOptions o;
  o.copy_engines = copy_engines;
  o.update_in_backward = update_in_backward;
  const bool keep = shard == "zero3-keep";
  if (!rtd::parse_shard_strategy(keep ? "zero3" : shard, &o.strategy))
    throw std::runtime_error("--shard: no strategy '" + shard + "'");
  o.reshard_after_forward = !keep;
  // 16-bit rows reduce in the products' type: bf16, or float16 with --fp16.
  const rtd::DType half = c.fp16 ? rtd::DType::kFloat16 : rtd::DType::kBFloat16;
  o.param_dtype = half;
  c.half_grads = reduce == "bf16";
  o.reduce_dtype = c.half_grads ? half : rtd::DType::kFloat32;
  if (c.fp16) o.loss_scale.dynamic = true;
  const std::string wire = c.half_grads ? (c.fp16 ? "fp16" : "bf16") : "fp32";
  c.external_weights = true;
  mlp::Model model(c, s);
  const std::size_t n = model.layer_elems();
  std::unique_ptr<rtd::FSDP> sharded = mlp::shard_model(ctx, model, c.layers, o, s);
  rtd::FSDP& fsdp = *sharded;
  rtd::StreamRef ref{s};
  mlp::LayerHooks hooks = mlp::fsdp_hooks(fsdp, ref);
  PhaseEvents phases(warmup + steps, s);
  Result r{.mode = shard + (update_in_backward ? "+ub" : "") + precision_suffix(c),
           .grads = wire,
           .reduce = wire,
           .method = fsdp.gather_method()};
  time_steps(
      [&](int i) {
        phases.mark(i, PhaseEvents::kStart);
        model.set_loss_scale(fsdp.loss_scale());
        model.forward(s, &hooks);
        phases.mark(i, PhaseEvents::kForward);
        model.backward([&](int l) { return fsdp.grad(l, 0).data; },
                       [&](int l) { fsdp.post_backward(l, ref); }, s, &hooks);
        phases.mark(i, PhaseEvents::kBackward);
        if (!fsdp.step(ref)) ++r.skipped;
        phases.mark(i, PhaseEvents::kEnd);
      },
      warmup, steps, s, power, r);
  phases.fill(r, warmup, steps);
  r.loss_scale = fsdp.loss_scale();
  r.model_gib = static_cast<double>(model.bytes() + fsdp.state_bytes()) / (1 << 30);
  r.device_gib = device_used_gib();
  // Bytes per parameter: bf16 weights, gradients in `reduce`, and 12 of
  // optimizer state (fp32 master, two moments); sharded over the group.
  const double psi = static_cast<double>(n) * c.layers, g = reduce == "bf16" ? 2 : 4;
  const int world = ctx.world_size();
  const double group = o.strategy == rtd::ShardStrategy::kHybrid
                           ? static_cast<double>(ctx.world().local_world_size)
                           : static_cast<double>(world);
  double bytes = (2 + g + 12) * psi / group;
  if (o.strategy == rtd::ShardStrategy::kZero1) bytes = (2 + g) * psi + 12 * psi / group;
  if (o.strategy == rtd::ShardStrategy::kZero2) bytes = 2 * psi + (g + 12) * psi / group;
  r.states_gib = bytes / (1 << 30);
  return r;
}

// Per configuration, the round with the median step time.
std::vector<Result> median_rounds(const std::vector<std::vector<Result>>& by_round) {
  std::vector<Result> out;
  for (std::size_t i = 0; i < by_round[0].size(); ++i) {
    std::vector<Result> runs;
    for (const auto& round : by_round) runs.push_back(round[i]);
    std::sort(runs.begin(), runs.end(),
              [](const Result& a, const Result& b) { return a.step_ms < b.step_ms; });
    out.push_back(runs[runs.size() / 2]);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  mlp::MlpConfig c;
  int warmup = 5, steps = 15, rounds = 1;
  std::vector<std::string> grad_dtypes{"fp32"}, buckets{"25"}, reduces{"fp32"}, overlaps{"0", "1"},
      registers{"0"}, backward_sms{"0"}, copy_engines{"1"}, shards, ddp_modes{"1"},
      update_in_backward{"0"}, precisions{"0"};
  std::string json;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string f = argv[i], v = argv[i + 1];
    if (f == "--hidden")
      c.hidden = std::stoi(v);
    else if (f == "--layers")
      c.layers = std::stoi(v);
    else if (f == "--batch")
      c.batch = std::stoi(v);
    else if (f == "--warmup")
      warmup = std::stoi(v);
    else if (f == "--steps")
      steps = std::stoi(v);
    else if (f == "--bucket-mb")
      buckets = split(v);
    else if (f == "--reduce")
      reduces = split(v);
    else if (f == "--grads")
      grad_dtypes = split(v);
    else if (f == "--json")
      json = v;
    else if (f == "--overlap-optimizer")
      overlaps = split(v);
    else if (f == "--register")
      registers = split(v);
    else if (f == "--backward-sms")
      backward_sms = split(v);
    else if (f == "--copy-engines")
      copy_engines = split(v);
    else if (f == "--shard")
      shards = split(v);
    else if (f == "--update-in-backward")
      update_in_backward = split(v);
    else if (f == "--fp16")
      precisions = split(v);
    else if (f == "--ddp")
      ddp_modes = split(v);
    else if (f == "--rounds")
      rounds = std::max(1, std::stoi(v));
    else {
      std::fprintf(stderr,
                   "usage: ddp_step [--hidden H --layers L --batch B --warmup W --steps S "
                   "--grads fp32,bf16 --bucket-mb 25,100 --reduce fp32,bf16 "
                   "--overlap-optimizer 0,1,serial,comm --register 0,1 "
                   "--backward-sms 0,108 --copy-engines 0,1 --rounds R --json FILE\n"
                   "                --shard zero1,zero2,zero3,zero3-keep,hybrid --ddp 1|0\n"
                   "                --update-in-backward 0,1 --fp16 0,1]\n"
                   "  --shard: rtd::FSDP rows too, for each --reduce dtype and --copy-engines\n"
                   "  value (bf16 weights; zero3-keep: no reshard after forward); --ddp 0\n"
                   "  leaves the DDP rows out; --update-in-backward 1: FSDP updates each\n"
                   "  unit as its gradient arrives (rows marked +ub); --fp16 1: the one-GPU\n"
                   "  and sharded rows again in float16 with loss scaling (marked /fp16)\n"
                   "  --grads bf16: the products write bf16 weight gradients and AdamW reads\n"
                   "  them (DDP's grad_dtype); its efficiency is against a one-GPU step with\n"
                   "  bf16 gradients too. --reduce: the wire dtype (a cast where it differs)\n"
                   "  --rounds R: the one-GPU step and every configuration R times over, each\n"
                   "  reported as its median round (drift such as clocks then hits all alike)\n");
      return 2;
    }
  }
  // Sharded rows with bf16 gradients compare with a one-GPU step that writes
  // bf16 gradients too.
  const bool bf16_reduce = std::find(reduces.begin(), reduces.end(), "bf16") != reduces.end();
  if (!shards.empty() && bf16_reduce &&
      std::find(grad_dtypes.begin(), grad_dtypes.end(), "bf16") == grad_dtypes.end())
    grad_dtypes.push_back("bf16");
  for (const auto& g : grad_dtypes) {
    if (g != "fp32" && g != "bf16") {
      std::fprintf(stderr, "ddp_step: --grads takes fp32 and/or bf16, not '%s'\n", g.c_str());
      return 2;
    }
  }
  try {
    auto ctx = rtd::init({.backend = rtd::Backend::kNccl});
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    char bus_id[32] = {};
    int device = 0;
    cudaGetDevice(&device);
    cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device);
    rtd::bench::GpuPower power(bus_id);
    if (!power.available() && ctx->rank() == 0)
      std::fprintf(stderr, "ddp_step: no energy readings: %s\n", power.why().c_str());
    // Power with the GPU idle, for the header: a second with nothing queued.
    const double idle_j0 = power.joules();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const double idle_watts = power.joules() - idle_j0;
    const std::vector<DdpRun> runs =
        ddp_runs({grad_dtypes, copy_engines, backward_sms, registers, overlaps, reduces, buckets});
    std::vector<std::vector<Result>> by_round;
    for (int round = 0; round < rounds; ++round) {
      std::vector<Result> results;
      for (const auto& fp16 : precisions) {
        c.fp16 = fp16 == "1";
        for (const auto& g : grad_dtypes) {
          c.half_grads = g == "bf16";
          results.push_back(run_single(c, warmup, steps, s, power));
          ctx->comm().barrier()->wait();
        }
      }
      c.fp16 = false;  // DDP rows: bfloat16 products only
      for (const DdpRun& run : runs) {
        if (ddp_modes[0] == "0") break;
        results.push_back(run_ddp(*ctx, c, run, warmup, steps, s, power));
        ctx->comm().barrier()->wait();
      }
      for (const auto& fp16 : precisions) {
        c.fp16 = fp16 == "1";
        for (const auto& shard : shards) {
          for (const auto& reduce : reduces) {
            for (const auto& ce : copy_engines) {
              for (const auto& ub : update_in_backward) {
                if (c.fp16 && ub == "1") continue;  // loss scaling needs every gradient first
                results.push_back(run_fsdp(*ctx, c, shard, reduce, ce == "1", ub == "1", warmup,
                                           steps, s, power));
                ctx->comm().barrier()->wait();
              }
            }
          }
        }
      }
      c.fp16 = false;
      by_round.push_back(std::move(results));
    }
    const std::vector<Result> results = median_rounds(by_round);
    if (ctx->rank() != 0) return 0;
    // Efficiency against the one-GPU step with the same gradient dtype.
    auto single_ms = [&](const Result& r) {
      for (const Result& one : results)
        if (one.mode == "one GPU" + precision_suffix(r) && one.grads == r.grads) return one.step_ms;
      return results[0].step_ms;
    };
    std::printf(
        "# MLP H=%d L=%d B=%d, %d ranks, %d timed steps after %d warm-up, median of %d "
        "round(s)\n",
        c.hidden, c.layers, c.batch, ctx->world_size(), steps, warmup, rounds);
    std::printf("# rank 0's GPU: power limit %.0f W, idle %.0f W\n", power.limit_watts(),
                idle_watts);
    std::printf(
        "%-13s %5s %9s %6s %4s %4s %7s %10s %11s %11s %7s %7s %8s %7s %6s %6s %10s %11s %11s\n",
        "mode", "grads", "bucket_mb", "reduce", "via", "reg", "bwd_sms", "step_ms", "efficiency",
        "exposed_ms", "fwd_ms", "bwd_ms", "after_ms", "J/step", "W", "SM_MHz", "model_GiB",
        "device_GiB", "states_GiB");
    std::ofstream out;
    if (!json.empty()) out.open(json);
    if (out) {
      out << "{\"ranks\": " << ctx->world_size() << ", \"steps\": " << steps
          << ", \"power_limit_w\": " << json_number(power.limit_watts())
          << ", \"idle_w\": " << json_number(idle_watts) << ", \"rounds\": " << rounds
          << ", \"rows\": [\n";
    }
    for (std::size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      const double single = single_ms(r);
      const char* via = r.method == "copy engines" ? "ce" : (r.method == "-" ? "-" : "nccl");
      std::printf(
          "%-13s %5s %9.0f %6s %4s %4s %7s %10.2f %11.3f %11.2f %7.2f %7.2f %8.2f %7.2f %6.0f "
          "%6.0f %10.2f %11.2f %11.2f\n",
          r.mode.c_str(), r.grads.c_str(), r.bucket_mb, r.reduce.c_str(), via,
          r.registered ? "yes" : "no",
          r.backward_sms ? std::to_string(r.backward_sms).c_str() : "all", r.step_ms,
          single / r.step_ms, r.step_ms - single, r.forward_ms, r.backward_ms, r.after_ms, r.joules,
          r.watts, r.sm_mhz, r.model_gib, r.device_gib, r.states_gib);
      if (!precision_suffix(r).empty() && r.loss_scale > 0)
        std::printf("#   %s: %d of %d steps skipped by the loss scale, %.0f at the end\n",
                    r.mode.c_str(), r.skipped, warmup + steps, r.loss_scale);
      if (out) {
        out << "  {\"mode\": \"" << r.mode << "\", \"grads\": \"" << r.grads
            << "\", \"bucket_mb\": " << r.bucket_mb << ", \"reduce\": \"" << r.reduce
            << "\", \"registered\": " << (r.registered ? "true" : "false") << ", \"method\": \""
            << r.method << "\", \"backward_sms\": " << r.backward_sms
            << ", \"step_ms\": " << r.step_ms << ", \"forward_ms\": " << r.forward_ms
            << ", \"backward_ms\": " << r.backward_ms << ", \"after_backward_ms\": " << r.after_ms
            << ", \"efficiency\": " << single / r.step_ms
            << ", \"exposed_ms\": " << r.step_ms - single
            << ", \"joules_per_step\": " << json_number(r.joules)
            << ", \"watts\": " << json_number(r.watts) << ", \"sm_mhz\": " << json_number(r.sm_mhz)
            << ", \"skipped_steps\": " << r.skipped << ", \"loss_scale\": " << r.loss_scale
            << ", \"model_gib\": " << r.model_gib << ", \"device_gib\": " << r.device_gib
            << ", \"states_gib\": " << r.states_gib << "}"
            << (i + 1 < results.size() ? ",\n" : "\n");
      }
    }
    if (out) out << "]}\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
