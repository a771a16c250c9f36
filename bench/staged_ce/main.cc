// staged_ce_bench: a staged site's copy-engine all-reduce and reduce-scatter
// (the rtd backend's, for buffers the peers never mapped) two ways, in turns:
//   copy-in  the input copied whole into a buffer the peers mapped, the
//            persistent copy-engine collective run on it, and (all-reduce)
//            the result copied out again (StagedCollectives until 2026-12);
//   push     each rank pushes its peers' chunks straight from the input into
//            their landing slots (CopyEnginePushCollective, since).
// Ranks on one host; on a machine with one GPU every rank shares it (then
// every copy is within one GPU: the figures show the copies saved, not a
// link's speed). Per (op, size, method): the median over rounds of the mean
// time of a call in a block of calls, CUDA events on the caller's stream.
//   dtrun --nproc-per-node=2 staged_ce_bench [--mb 1,4,25,100] [--rounds 5] [--calls 20]
//                                            [--json FILE]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/device_memory.h"
#include "collectives/factory.h"
#include "collectives/nccl/ce_all_reduce.h"
#include "collectives/nccl/ce_push_collective.h"
#include "collectives/nccl/ce_shard_collective.h"
#include "rt_dist/rt_dist.h"

namespace rtd::nccl {
namespace {

struct Options {
  std::vector<std::size_t> mb = {1, 4, 25, 100};
  int rounds = 5, calls = 20;
  std::string json;
};

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    try {
      if (f == "--mb") {
        o->mb.clear();
        std::stringstream in(v);
        for (std::string x; std::getline(in, x, ',');) o->mb.push_back(std::stoul(x));
      } else if (f == "--rounds") {
        o->rounds = std::stoi(v);
      } else if (f == "--calls") {
        o->calls = std::stoi(v);
      } else if (f == "--json") {
        o->json = v;
      } else {
        std::fprintf(stderr, "staged_ce_bench: unknown flag %s\n", f.c_str());
        return false;
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "staged_ce_bench: %s wants a number, got '%s'\n", f.c_str(), v.c_str());
      return false;
    }
  }
  return !o->mb.empty() && o->rounds > 0 && o->calls > 0;
}

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess)
    throw Error(ErrorCategory::kBackend, std::string(what) + ": " + cudaGetErrorString(rc));
}

// One way of running a site's call: in -> out on the caller's stream.
struct Way {
  std::string name;
  std::function<void(cudaStream_t)> call;
};

int run(const Options& opt) {
  auto ctx = init(InitOptions{.backend = Backend::kGloo});
  const int rank = ctx->rank(), size = ctx->world_size();
  int gpus = 0;
  check(cudaGetDeviceCount(&gpus), "counting GPUs");
  const int device = ctx->local_rank() % gpus;
  check(cudaSetDevice(device), "selecting the GPU");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "making a stream");
  auto state =
      std::make_shared<CommState>(real_nccl_api(), real_cuda_api(), rank, std::chrono::seconds(60));
  state->set_recorder(std::make_shared<FlightRecorder>(nullptr, rank, size));
  std::shared_ptr<Store> root(&ctx->store(), [](Store*) {});
  std::vector<std::shared_ptr<Store>> scopes;
  auto setup = [&](const std::string& name, std::vector<BufferView> buffers) {
    scopes.push_back(make_prefix_store("staged_ce/" + name + "/", root));
    return CeSetup{.state = state,
                   .store = scopes.back().get(),
                   .rank = rank,
                   .size = size,
                   .device = device,
                   .buffers = std::move(buffers),
                   .op = ReduceOp::kSum,
                   .timeout = std::chrono::seconds(60)};
  };
  cudaEvent_t t0 = nullptr, t1 = nullptr;
  check(cudaEventCreate(&t0), "making an event");
  check(cudaEventCreate(&t1), "making an event");
  std::ostringstream rows;
  if (rank == 0) {
    std::printf(
        "# staged_ce_bench: %d ranks on %d GPU(s); us per call, median of %d rounds of %d\n", size,
        gpus, opt.rounds, opt.calls);
    std::printf("%-15s %8s %12s %12s %8s\n", "op", "MiB", "copy-in us", "push us", "ratio");
  }
  for (const char* op : {"all_reduce", "reduce_scatter"}) {
    const bool ar = std::string(op) == "all_reduce";
    for (std::size_t mb : opt.mb) {
      const std::size_t count = (mb << 20) / 4 / size * size;  // float32
      const std::size_t bytes = count * 4, out_bytes = ar ? bytes : bytes / size;
      DeviceBuffer in(DeviceType::kCuda, device, bytes), out(DeviceType::kCuda, device, out_bytes),
          staging(DeviceType::kCuda, device, bytes);
      check(cudaMemset(in.data(), 0, bytes), "zeroing");
      auto view = [&](void* p, std::size_t n) {
        return BufferView{.data = p,
                          .count = n,
                          .dtype = DType::kFloat32,
                          .device = DeviceType::kCuda,
                          .device_index = device};
      };
      const BufferView vin = view(in.data(), count), vout = view(out.data(), out_bytes / 4),
                       vstage = view(staging.data(), count);
      const std::string tag = std::string(op) + "/" + std::to_string(mb);
      std::string why;
      std::unique_ptr<CopyEngineAllReduce> persistent_ar;
      std::unique_ptr<CopyEngineShardCollective> persistent_rs;
      if (ar) {
        persistent_ar = CopyEngineAllReduce::create(setup(tag + "/copy-in", {vstage}), &why);
      } else {
        persistent_rs =
            CopyEngineShardCollective::create(setup(tag + "/copy-in", {vstage}), false, &why);
      }
      auto push =
          CopyEnginePushCollective::create(setup(tag + "/push", {}),
                                           ar ? CopyEnginePushCollective::Kind::kAllReduce
                                              : CopyEnginePushCollective::Kind::kReduceScatter,
                                           count, DType::kFloat32, &why);
      if ((!persistent_ar && !persistent_rs) || !push) {
        std::fprintf(stderr, "staged_ce_bench: copy engines refused: %s\n", why.c_str());
        return 1;
      }
      std::vector<Way> ways = {
          {"copy-in",
           [&](cudaStream_t s) {
             cast_async(vin, vstage, StreamRef{s});
             if (ar) {
               persistent_ar->run(0, StreamRef{s})->wait(StreamRef{s});
               cast_async(vstage, vout, StreamRef{s});
             } else {
               persistent_rs->run(vstage, vout, StreamRef{s})->wait(StreamRef{s});
             }
           }},
          {"push",
           [&](cudaStream_t s) { push->run(vin, vout, StreamRef{s})->wait(StreamRef{s}); }}};
      std::vector<std::vector<double>> us(ways.size());
      for (int round = -1; round < opt.rounds; ++round) {  // round -1: warm-up
        for (std::size_t w = 0; w < ways.size(); ++w) {
          ctx->comm().barrier()->wait();
          check(cudaEventRecord(t0, stream), "recording");
          for (int c = 0; c < opt.calls; ++c) ways[w].call(stream);
          check(cudaEventRecord(t1, stream), "recording");
          check(cudaEventSynchronize(t1), "waiting");
          state->overdue();
          float ms = 0;
          check(cudaEventElapsedTime(&ms, t0, t1), "timing");
          if (round >= 0) us[w].push_back(1000.0 * ms / opt.calls);
        }
      }
      auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      const double a = median(us[0]), b = median(us[1]);
      if (rank == 0) {
        std::printf("%-15s %8zu %12.1f %12.1f %8.2f\n", op, mb, a, b, a / b);
        rows << (rows.tellp() > 0 ? ",\n" : "") << "  {\"op\": \"" << op << "\", \"mib\": " << mb
             << ", \"copy_in_us\": " << a << ", \"push_us\": " << b << "}";
      }
    }
  }
  if (rank == 0 && !opt.json.empty()) {
    std::ofstream(opt.json) << "{\"ranks\": " << size << ", \"gpus\": " << gpus << ", \"rows\": [\n"
                            << rows.str() << "\n]}\n";
  }
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace
}  // namespace rtd::nccl

int main(int argc, char** argv) {
  rtd::nccl::Options opt;
  if (!rtd::nccl::parse(argc, argv, &opt)) {
    std::fprintf(stderr,
                 "usage: staged_ce_bench [--mb 1,4,25,100] [--rounds 5] [--calls 20] "
                 "[--json FILE]\n");
    return 2;
  }
  try {
    return rtd::nccl::run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "staged_ce_bench: %s\n", e.what());
    return 1;
  }
}
