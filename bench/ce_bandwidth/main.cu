// ce_bandwidth: how fast GPUs of one host move bytes between each other, by
// copy engine (cudaMemcpyAsync on a stream per transfer) and by SM loads
// (a kernel reading a peer's memory), in the patterns the copy-engine
// all-reduce uses. One process drives every visible GPU (peer access on).
// Per pattern, the bytes each GPU receives per second (GB/s):
//   pull 1        GPU 0 copies from GPU 1 (a stream of GPU 0)
//   push 1        GPU 0 copies to GPU 1 (a stream of GPU 0)
//   pull all      GPU 0 copies from every peer at once (a stream per peer)
//   push all      GPU 0 copies to every peer at once
//   all pull all  every GPU copies from every peer at once (the all-reduce's traffic)
//   ring pull     every GPU copies from the next (rank + 1) at once
//   rotation pull every GPU copies from rank + 1, then rank + 2, ... on one stream
//   sm pull all   every GPU reads every peer with a kernel (NCCL's way), same bytes
//   ce_bandwidth [--mb 256] [--reps 10] [--json FILE]
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace {

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    std::fprintf(stderr, "ce_bandwidth: %s: %s\n", what, cudaGetErrorString(rc));
    std::exit(1);
  }
}

// dst[i] = src[i], 16 bytes per load; src may be a peer's memory.
__global__ void k_copy(int4* dst, const int4* src, std::size_t n) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

struct Gpu {
  int id = 0;
  char* src = nullptr;                // what peers read from
  std::vector<char*> dst;             // per peer: where its bytes land here
  std::vector<cudaStream_t> streams;  // per peer
};

}  // namespace

int main(int argc, char** argv) {
  std::size_t mb = 256;
  int reps = 10;
  std::string json;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string f = argv[i], v = argv[i + 1];
    if (f == "--mb")
      mb = std::stoul(v);
    else if (f == "--reps")
      reps = std::stoi(v);
    else if (f == "--json")
      json = v;
    else {
      std::fprintf(stderr, "usage: ce_bandwidth [--mb 256] [--reps 10] [--json FILE]\n");
      return 2;
    }
  }
  int n = 0;
  check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  if (n < 2) {
    std::fprintf(stderr, "ce_bandwidth: needs two GPUs, found %d\n", n);
    return 1;
  }
  const std::size_t bytes = mb << 20;
  std::vector<Gpu> gpus(n);
  for (int g = 0; g < n; ++g) {
    Gpu& gpu = gpus[g];
    gpu.id = g;
    check(cudaSetDevice(g), "cudaSetDevice");
    for (int p = 0; p < n; ++p) {
      if (p != g) check(cudaDeviceEnablePeerAccess(p, 0), "cudaDeviceEnablePeerAccess");
    }
    check(cudaMalloc(&gpu.src, bytes), "cudaMalloc");
    check(cudaMemset(gpu.src, 1, bytes), "cudaMemset");
    gpu.dst.assign(n, nullptr);
    gpu.streams.assign(n, nullptr);
    for (int p = 0; p < n; ++p) {
      check(cudaMalloc(&gpu.dst[p], bytes), "cudaMalloc");
      check(cudaStreamCreateWithFlags(&gpu.streams[p], cudaStreamNonBlocking), "stream");
    }
  }
  auto sync_all = [&] {
    for (int g = 0; g < n; ++g) {
      cudaSetDevice(g);
      check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    }
  };
  // Seconds per repetition of enqueue(), after one warm-up.
  auto time = [&](const std::function<void()>& enqueue) {
    enqueue();
    sync_all();
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) enqueue();
    sync_all();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  };
  auto ce = [&](int on, int from, int to) {  // a copy engine of `on` moves from -> to
    cudaSetDevice(on);
    const int peer = on == to ? from : to;
    check(cudaMemcpyAsync(gpus[to].dst[from], gpus[from].src, bytes, cudaMemcpyDeviceToDevice,
                          gpus[on].streams[peer]),
          "cudaMemcpyAsync");
  };
  auto sm = [&](int on, int from) {  // `on` reads `from` with a kernel
    cudaSetDevice(on);
    k_copy<<<264, 512, 0, gpus[on].streams[from]>>>(reinterpret_cast<int4*>(gpus[on].dst[from]),
                                                    reinterpret_cast<const int4*>(gpus[from].src),
                                                    bytes / 16);
    check(cudaGetLastError(), "k_copy");
  };
  struct Row {
    std::string pattern;
    double gbps;
  };
  std::vector<Row> rows;
  auto add = [&](const std::string& name, double peers, const std::function<void()>& enqueue) {
    double secs = time(enqueue);
    rows.push_back({name, peers * bytes / secs / 1e9});
  };
  add("pull 1", 1, [&] { ce(0, 1, 0); });
  add("push 1", 1, [&] { ce(0, 0, 1); });
  add("pull all", n - 1, [&] {
    for (int p = 1; p < n; ++p) ce(0, p, 0);
  });
  add("push all", n - 1, [&] {
    for (int p = 1; p < n; ++p) ce(0, 0, p);
  });
  add("all pull all", n - 1, [&] {
    for (int g = 0; g < n; ++g)
      for (int p = 0; p < n; ++p)
        if (p != g) ce(g, p, g);
  });
  add("ring pull", 1, [&] {
    for (int g = 0; g < n; ++g) ce(g, (g + 1) % n, g);
  });
  add("rotation pull", n - 1, [&] {
    for (int g = 0; g < n; ++g) {
      cudaSetDevice(g);
      for (int k = 1; k < n; ++k) {
        check(cudaMemcpyAsync(gpus[g].dst[(g + k) % n], gpus[(g + k) % n].src, bytes,
                              cudaMemcpyDeviceToDevice, gpus[g].streams[(g + 1) % n]),
              "cudaMemcpyAsync");
      }
    }
  });
  add("sm pull 1", 1, [&] { sm(0, 1); });
  add("sm pull all", n - 1, [&] {
    for (int g = 0; g < n; ++g)
      for (int p = 0; p < n; ++p)
        if (p != g) sm(g, p);
  });
  std::printf("# %d GPUs, %zu MB per transfer, %d repetitions; GB/s received per GPU\n", n, mb,
              reps);
  for (const Row& r : rows) std::printf("%-14s %8.1f\n", r.pattern.c_str(), r.gbps);
  if (!json.empty()) {
    std::ofstream out(json);
    out << "{\"gpus\": " << n << ", \"mb\": " << mb << ", \"rows\": [";
    for (std::size_t i = 0; i < rows.size(); ++i)
      out << (i ? ", " : "") << "{\"pattern\": \"" << rows[i].pattern
          << "\", \"gbps\": " << rows[i].gbps << "}";
    out << "]}\n";
  }
  return 0;
}
