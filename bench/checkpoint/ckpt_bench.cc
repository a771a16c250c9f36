// ckpt_bench: save and load throughput of rtd::ckpt::Checkpointer for a state
// of a given size, held by R ranks (threads of this process sharing a memory
// store, each with its slice of every tensor, as DDP's ranks save), into DIR.
// The state is the reference MLP's with AdamW: parameters, two moments, each
// float32 (--params 537e6: about 6.4 GB). Prints a table line and JSON.
//   ckpt_bench --dir /path --params 537e6 --ranks 2 [--rounds 2] [--device cuda]
//              [--io-threads 4] [--check-first 0|1]
// With --device cuda the state lives on GPU 0 (every rank's slice), as a
// GPU trainer's does: the save copies it through host memory (pinned for
// save_async), and the load copies it back.
// Load runs after the page cache was dropped where this process may do so
// (root), else it says that it read from the cache. The asynchronous save is
// timed too: how long the second of two save_async() calls takes to return,
// how long the training loop is held (the copy of the state into memory the
// first call allocated: on the GPU, until the copies on the Checkpointer's
// side stream are done and the caller's stream may go on), and how long both
// saves took to become durable.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "rt_dist/checkpoint.h"
#ifdef RTD_BENCH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

bool drop_page_cache() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  if (!f) return false;
  f << "3\n";
  return static_cast<bool>(f.flush());
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  double params = 537e6;
  int ranks = 2, rounds = 2;
  bool gpu = false;
  int io_threads = rtd::ckpt::Options{}.io_threads;
  bool check_first = rtd::ckpt::Options{}.check_before_load;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string f = argv[i], v = argv[i + 1];
    if (f == "--dir")
      dir = v;
    else if (f == "--params")
      params = std::atof(v.c_str());
    else if (f == "--ranks")
      ranks = std::atoi(v.c_str());
    else if (f == "--rounds")
      rounds = std::atoi(v.c_str());
    else if (f == "--device")
      gpu = v == "cuda";
    else if (f == "--io-threads")
      io_threads = std::atoi(v.c_str());
    else if (f == "--check-first")
      check_first = v != "0";
    else {
      std::fprintf(stderr,
                   "usage: ckpt_bench --dir DIR [--params 537e6] [--ranks 2] [--rounds 2] "
                   "[--device cuda] [--io-threads N] [--check-first 0|1]\n");
      return 2;
    }
  }
  if (dir.empty() || params < 1 || ranks < 1 || rounds < 1 || io_threads < 1) {
    std::fprintf(stderr,
                 "ckpt_bench needs --dir, and positive --params, --ranks, --rounds, "
                 "--io-threads\n");
    return 2;
  }
  const std::size_t n = static_cast<std::size_t>(params);
  const char* names[] = {"param", "exp_avg", "exp_avg_sq"};
  // Each rank's slice of the three tensors, filled with something other than zeros.
  std::vector<std::vector<std::vector<float>>> data(ranks);
  for (int r = 0; r < ranks; ++r) {
    const std::size_t lo = n * r / ranks, hi = n * (r + 1) / ranks;
    for (int t = 0; t < 3; ++t) {
      data[r].emplace_back(hi - lo);
      for (std::size_t i = 0; i < hi - lo; ++i)
        data[r][t][i] = static_cast<float>((lo + i) % 1000) * 0.001f + t;
    }
  }
  // On the GPU: the same values, in device memory.
  std::vector<std::vector<void*>> device(ranks, std::vector<void*>(3, nullptr));
  if (gpu) {
#ifdef RTD_BENCH_CUDA
    for (int r = 0; r < ranks; ++r)
      for (int t = 0; t < 3; ++t) {
        const std::size_t bytes = data[r][t].size() * sizeof(float);
        if (cudaMalloc(&device[r][t], bytes) != cudaSuccess ||
            cudaMemcpy(device[r][t], data[r][t].data(), bytes, cudaMemcpyHostToDevice) !=
                cudaSuccess) {
          std::fprintf(stderr, "ckpt_bench: cannot place the state on the GPU\n");
          return 1;
        }
      }
#else
    std::fprintf(stderr, "ckpt_bench: built without CUDA; --device cuda is not available\n");
    return 2;
#endif
  }
  auto state_of = [&](int r) {
    rtd::ckpt::State s;
    const std::size_t lo = n * r / ranks;
    for (int t = 0; t < 3; ++t) {
      rtd::ckpt::Range range{lo, data[r][t].size(), data[r][t].data()};
      if (gpu) range = {lo, data[r][t].size(), device[r][t], rtd::DeviceType::kCuda, 0};
      s.tensors.push_back(rtd::ckpt::Tensor{
          names[t], rtd::DType::kFloat32, {static_cast<std::int64_t>(n)}, {range}});
    }
    return s;
  };
  const double bytes = 3.0 * n * sizeof(float);
  std::printf("state on the %s\n", gpu ? "GPU" : "host");
  std::printf("%10s %6s %10s %10s %12s %12s %12s %12s %12s %s\n", "GB", "ranks", "save_s", "load_s",
              "save_GB/s", "load_GB/s", "async_call_s", "async_blk_s", "async_all_s", "load from");
  for (int round = 0; round < rounds; ++round) {
    std::filesystem::remove_all(dir);
    auto store = rtd::make_memory_store();
    std::vector<double> blocked(ranks), returned(ranks);
    enum class Mode { kSave, kLoad, kAsync };
    auto run = [&](Mode mode) {
      store = rtd::make_memory_store();  // each run's Checkpointers count their calls from 0
      std::vector<std::thread> threads;
      const auto t0 = Clock::now();
      for (int r = 0; r < ranks; ++r) {
        threads.emplace_back([&, r] {
          rtd::ckpt::Checkpointer c(*store, r, ranks,
                                    {.dir = dir,
                                     .keep_last = 1,
                                     .io_threads = io_threads,
                                     .check_before_load = check_first});
          rtd::ckpt::State s = state_of(r);
          if (mode == Mode::kSave) {
            c.save(1, s);
          } else if (mode == Mode::kLoad) {
            c.load(s, false);
          } else {
            // Two saves: the first fills the Checkpointer's copy memory, the
            // second (timed) reuses it, as a training loop's saves do.
            rtd::StreamRef stream;
#ifdef RTD_BENCH_CUDA
            cudaStream_t cs = nullptr;
            if (gpu) cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking);
            stream.cuda_stream = cs;
#endif
            c.save_async(2, s, stream);
            c.wait();
            const auto a = Clock::now();
            c.save_async(3, s, stream);
            returned[r] = std::chrono::duration<double>(Clock::now() - a).count();
#ifdef RTD_BENCH_CUDA
            if (gpu) cudaStreamSynchronize(cs);  // the step after the save may start
#endif
            blocked[r] = std::chrono::duration<double>(Clock::now() - a).count();
            c.wait();
#ifdef RTD_BENCH_CUDA
            if (gpu) cudaStreamDestroy(cs);
#endif
          }
        });
      }
      for (auto& t : threads) t.join();
      return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    const double save_s = run(Mode::kSave);
    const bool cold = drop_page_cache();
    const double load_s = run(Mode::kLoad);
    const double async_s = run(Mode::kAsync);
    double block_s = 0, call_s = 0;
    for (double b : blocked) block_s = std::max(block_s, b);
    for (double b : returned) call_s = std::max(call_s, b);
    const char* from = cold ? "disk" : "page cache";
    std::printf("%10.2f %6d %10.3f %10.3f %12.2f %12.2f %12.4f %12.3f %12.3f %s\n", bytes / 1e9,
                ranks, save_s, load_s, bytes / 1e9 / save_s, bytes / 1e9 / load_s, call_s, block_s,
                async_s, from);
    std::printf(
        "{\"bench\":\"ckpt\",\"bytes\":%.0f,\"ranks\":%d,\"io_threads\":%d,\"check_first\":%d,"
        "\"save_s\":%.4f,"
        "\"load_s\":%.4f,\"async_call_s\":%.5f,\"async_block_s\":%.4f,\"async_total_s\":%.4f,"
        "\"load_from\":\"%s\",\"device\":\"%s\"}\n",
        bytes, ranks, io_threads, check_first ? 1 : 0, save_s, load_s, call_s, block_s, async_s,
        from, gpu ? "cuda" : "cpu");
    std::fflush(stdout);
  }
  std::filesystem::remove_all(dir);
  return 0;
}
