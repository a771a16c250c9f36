// interference: how much a gradient reduction running beside bf16 products
// slows them, by the kind of traffic. One process drives two GPUs (peer access
// on): on each, a run of 8192^3 bf16 products on a compute stream, and beside
// it on a second stream one of
//   none    nothing;
//   nccl    NCCL all-reduce of the buckets (float32 sum, as DDP's fp32 wire);
//   ce      the traffic of a two-GPU all-reduce done by copy engines: for each
//           bucket, pull the peer's half (cudaMemcpyPeerAsync), push one's own
//           half back (no SM instructions; no addition, so not an all-reduce);
//   ce+add  the same with the addition of the pulled half on SMs in between,
//           which is the whole work of a copy-engine all-reduce.
// Each variant is timed alone and overlapped (both streams start together);
// the products' slowdown is the interference. Prints a table and JSON.
//   interference [--products 16] [--buckets 8] [--bucket-mb 256] [--reps 5] [--json FILE]
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/common/gpu_check.h"
#include "bench/interference/avg_kernel.h"
#include "examples/02_mlp_gpu/gemm.h"

namespace {

constexpr int kGpus = 2;
constexpr int kDim = 8192;

using rtd::bench::cuda_check;
using rtd::bench::nccl_check;

struct Gpu {
  int device = 0;
  cudaStream_t compute = nullptr, comm = nullptr;
  cudaEvent_t start = nullptr, compute_end = nullptr, comm_end = nullptr;
  __nv_bfloat16 *a = nullptr, *b = nullptr, *c = nullptr;
  float* buckets = nullptr;  // buckets x bucket_elems, float32
  float* scratch = nullptr;  // half a bucket: the pulled half
  mlp::Gemm* gemm = nullptr;
  ncclComm_t nccl = nullptr;
};

struct Options {
  int products = 16;
  int buckets = 8;
  std::size_t bucket_mb = 256;
  int reps = 5;
  std::string json;
};

struct Timing {
  float compute_ms = 0, comm_ms = 0;  // on GPU 0, median over reps
};

class Bench {
 public:
  explicit Bench(const Options& o) : o_(o), elems_(o.bucket_mb * (1 << 20) / sizeof(float)) {
    int n = 0;
    cuda_check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
    if (n < kGpus) throw std::runtime_error("needs two GPUs, found " + std::to_string(n));
    int devices[kGpus] = {0, 1};
    ncclComm_t comms[kGpus];
    nccl_check(ncclCommInitAll(comms, kGpus, devices), "ncclCommInitAll");
    for (int d = 0; d < kGpus; ++d) {
      Gpu& g = gpus_[d];
      g.device = d;
      g.nccl = comms[d];
      cuda_check(cudaSetDevice(d), "cudaSetDevice");
      cudaError_t rc = cudaDeviceEnablePeerAccess(1 - d, 0);
      if (rc != cudaSuccess && rc != cudaErrorPeerAccessAlreadyEnabled)
        cuda_check(rc, "cudaDeviceEnablePeerAccess");
      cudaGetLastError();
      cuda_check(cudaStreamCreateWithFlags(&g.compute, cudaStreamNonBlocking), "stream");
      int least = 0, greatest = 0;
      cuda_check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "priorities");
      cuda_check(cudaStreamCreateWithPriority(&g.comm, cudaStreamNonBlocking, greatest), "stream");
      for (cudaEvent_t* e : {&g.start, &g.compute_end, &g.comm_end})
        cuda_check(cudaEventCreate(e), "event");
      const std::size_t m = std::size_t(kDim) * kDim;
      for (auto** p : {&g.a, &g.b, &g.c})
        cuda_check(cudaMalloc(reinterpret_cast<void**>(p), m * sizeof(__nv_bfloat16)), "malloc");
      cuda_check(cudaMemset(g.a, 0x3c, m * sizeof(__nv_bfloat16)), "memset");  // ~0.01
      cuda_check(cudaMemset(g.b, 0x3c, m * sizeof(__nv_bfloat16)), "memset");
      cuda_check(
          cudaMalloc(reinterpret_cast<void**>(&g.buckets), o.buckets * elems_ * sizeof(float)),
          "malloc buckets");
      cuda_check(cudaMemset(g.buckets, 0, o.buckets * elems_ * sizeof(float)), "memset");
      cuda_check(cudaMalloc(reinterpret_cast<void**>(&g.scratch), elems_ / 2 * sizeof(float)),
                 "malloc scratch");
      g.gemm = new mlp::Gemm();
    }
    for (auto& g : gpus_) {
      cuda_check(cudaSetDevice(g.device), "cudaSetDevice");
      cuda_check(cudaDeviceSynchronize(), "sync");
    }
  }
  ~Bench() {
    for (auto& g : gpus_) {
      cudaSetDevice(g.device);
      delete g.gemm;
      ncclCommDestroy(g.nccl);
    }
  }

  // compute / traffic: whether each runs; traffic is "none", "nccl", "ce" or "ce+add".
  Timing run(bool compute, const std::string& traffic) {
    std::vector<float> compute_ms, comm_ms;
    for (int rep = 0; rep < o_.reps + 1; ++rep) {  // the first is a warm-up
      for (auto& g : gpus_) {
        cuda_check(cudaSetDevice(g.device), "cudaSetDevice");
        cuda_check(cudaEventRecord(g.start, g.compute), "record");
        cuda_check(cudaStreamWaitEvent(g.comm, g.start, 0), "wait");  // start together
        if (compute) {
          for (int i = 0; i < o_.products; ++i)
            g.gemm->grad_input(g.a, g.b, g.c, kDim, kDim, kDim, g.compute);
        }
        cuda_check(cudaEventRecord(g.compute_end, g.compute), "record");
      }
      enqueue_traffic(traffic);
      for (auto& g : gpus_) {
        cuda_check(cudaSetDevice(g.device), "cudaSetDevice");
        cuda_check(cudaEventRecord(g.comm_end, g.comm), "record");
      }
      for (auto& g : gpus_) {
        cuda_check(cudaSetDevice(g.device), "cudaSetDevice");
        cuda_check(cudaDeviceSynchronize(), "sync");
      }
      if (rep == 0) continue;
      float c = 0, t = 0;
      cuda_check(cudaEventElapsedTime(&c, gpus_[0].start, gpus_[0].compute_end), "elapsed");
      cuda_check(cudaEventElapsedTime(&t, gpus_[0].start, gpus_[0].comm_end), "elapsed");
      compute_ms.push_back(c);
      comm_ms.push_back(t);
    }
    return Timing{median(compute_ms), median(comm_ms)};
  }

 private:
  static float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }

  void enqueue_traffic(const std::string& traffic) {
    if (traffic == "none") return;
    const std::size_t half = elems_ / 2;
    for (int b = 0; b < o_.buckets; ++b) {
      if (traffic == "nccl") {
        nccl_check(ncclGroupStart(), "group start");
        for (auto& g : gpus_) {
          float* buf = g.buckets + b * elems_;
          nccl_check(ncclAllReduce(buf, buf, elems_, ncclFloat32, ncclSum, g.nccl, g.comm),
                     "ncclAllReduce");
        }
        nccl_check(ncclGroupEnd(), "group end");
        continue;
      }
      // Copy engines: GPU d owns half d of each bucket; it pulls the peer's
      // copy of that half, (adds it), and pushes the half into the peer's bucket.
      for (auto& g : gpus_) {
        cuda_check(cudaSetDevice(g.device), "cudaSetDevice");
        Gpu& peer = gpus_[1 - g.device];
        float* mine = g.buckets + b * elems_ + g.device * half;
        const float* theirs = peer.buckets + b * elems_ + g.device * half;
        cuda_check(cudaMemcpyPeerAsync(g.scratch, g.device, theirs, peer.device,
                                       half * sizeof(float), g.comm),
                   "pull");
        if (traffic == "ce+add") rtd::bench::average_into(mine, g.scratch, half, g.comm);
        float* dst = peer.buckets + b * elems_ + g.device * half;
        cuda_check(
            cudaMemcpyPeerAsync(dst, peer.device, mine, g.device, half * sizeof(float), g.comm),
            "push");
      }
    }
  }

  Options o_;
  std::size_t elems_;
  Gpu gpus_[kGpus];
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string f = argv[i], v = argv[i + 1];
    if (f == "--products")
      o.products = std::stoi(v);
    else if (f == "--buckets")
      o.buckets = std::stoi(v);
    else if (f == "--bucket-mb")
      o.bucket_mb = std::stoul(v);
    else if (f == "--reps")
      o.reps = std::stoi(v);
    else if (f == "--json")
      o.json = v;
    else {
      std::fprintf(stderr,
                   "usage: interference [--products 16] [--buckets 8] [--bucket-mb 256] "
                   "[--reps 5] [--json FILE]\n");
      return 2;
    }
  }
  try {
    Bench bench(o);
    const Timing alone = bench.run(true, "none");
    std::printf("# %d products of %d^3 bf16 beside %d x %zu MB of traffic, GPU 0, median of %d\n",
                o.products, kDim, o.buckets, o.bucket_mb, o.reps);
    std::printf("%-8s %14s %14s %16s %18s %13s\n", "traffic", "traffic_alone", "products_alone",
                "products_beside", "traffic_beside_ms", "slowdown_ms");
    std::ofstream out;
    if (!o.json.empty()) out.open(o.json);
    if (out) out << "{\"products_alone_ms\": " << alone.compute_ms << ", \"rows\": [\n";
    const char* kinds[] = {"nccl", "ce", "ce+add"};
    for (int k = 0; k < 3; ++k) {
      const Timing traffic = bench.run(false, kinds[k]);
      const Timing both = bench.run(true, kinds[k]);
      std::printf("%-8s %14.2f %14.2f %16.2f %18.2f %13.2f\n", kinds[k], traffic.comm_ms,
                  alone.compute_ms, both.compute_ms, both.comm_ms,
                  both.compute_ms - alone.compute_ms);
      if (out) {
        out << "  {\"traffic\": \"" << kinds[k] << "\", \"traffic_alone_ms\": " << traffic.comm_ms
            << ", \"products_beside_ms\": " << both.compute_ms
            << ", \"traffic_beside_ms\": " << both.comm_ms
            << ", \"slowdown_ms\": " << both.compute_ms - alone.compute_ms << "}"
            << (k < 2 ? ",\n" : "\n");
      }
    }
    if (out) out << "]}\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "interference: %s\n", e.what());
    return 1;
  }
  return 0;
}
