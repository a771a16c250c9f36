// collective_bench: nccl-tests-style sweep of ops x sizes x dtypes through one
// Runner (our communicator on GPU or CPU, or raw NCCL), with a wrong-element
// count per row. Run it under dtrun; rank 0 prints the table (and JSON).
//   dtrun --nproc-per-node=2 collective_bench --mode ours --max-bytes 1G
// --mode paired: raw NCCL and ours in one process, in alternating blocks, a
// row each ("all_reduce/raw", "all_reduce/ours").
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/collectives/runner.h"
#include "bench/common/host_sampler.h"
#include "bench/common/report.h"
#include "bench/common/typed_fill.h"
#include "rt_dist/error.h"

namespace rtd::bench {
namespace {

// Element counts of (input, output) for an op whose nccl-tests "size" is count elements.
std::pair<std::size_t, std::size_t> shape(const std::string& op, std::size_t count, int n) {
  if (op == "reduce_scatter") return {count, count / n};
  if (op == "all_gather") return {count / n, count};
  return {count, count};
}

// Expected output element i when rank r's input is all r + 1 (broadcast: root 0).
double expected(const std::string& op, std::size_t i, std::size_t block, int n) {
  if (op == "all_reduce" || op == "reduce_scatter") return n * (n + 1) / 2.0;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(i / block + 1);  // all_gather, all_to_all: block j from rank j
}

// One row per variant of the runner (most have one; "paired" alternates
// raw and ours block by block, so both see the same moments of the machine).
// sampler: kept on while the last variant (or o.sample_variant) runs
// (--sample-host), else null.
std::vector<Row> measure(Runner& runner, const BenchOptions& o, const std::string& op, DType dtype,
                         std::size_t bytes, HostSampler* sampler) {
  const int n = runner.size();
  std::size_t count = bytes / dtype_size(dtype);
  if (op != "all_reduce" && op != "broadcast") count -= count % n;
  auto [in_count, out_count] = shape(op, count, n);
  const std::size_t esize = dtype_size(dtype);
  std::vector<char> host(std::max(in_count, out_count) * esize);
  OpBuffers b{runner.alloc(in_count * esize), runner.alloc(out_count * esize), in_count, out_count,
              dtype};
  fill_value(host.data(), dtype, in_count, runner.rank() + 1);
  runner.upload(op == "broadcast" ? b.out : b.in, host.data(), in_count * esize);

  const std::vector<std::string> variants = runner.variants();
  for (std::size_t v = 0; v < variants.size(); ++v) {
    runner.select(v);
    runner.barrier();
    runner.time(op, b, o.warmup);
  }
  std::vector<std::vector<double>> blocks(variants.size()), issue(variants.size());
  for (int k = 0; k < o.blocks; ++k) {
    for (std::size_t v = 0; v < variants.size(); ++v) {
      runner.select(v);
      runner.barrier();
      const bool sampled = sampler && (o.sample_variant.empty() ? v + 1 == variants.size()
                                                                : variants[v] == o.sample_variant);
      if (sampled) sampler->keep(true);
      blocks[v].push_back(runner.time(op, b, o.iters));
      if (sampled) sampler->keep(false);
      issue[v].push_back(runner.host_us());
    }
  }
  long long wrong = -1;
  if (o.check) {  // the last variant's output (every variant computes the same)
    runner.download(host.data(), b.out, out_count * esize);
    const std::size_t block = std::max<std::size_t>(1, out_count / n);
    wrong = count_wrong(host.data(), dtype, out_count,
                        [&](std::size_t i) { return expected(op, i, block, n); });
  }
  runner.release(b.in);
  runner.release(b.out);
  std::vector<Row> rows;
  for (std::size_t v = 0; v < variants.size(); ++v) {
    std::sort(blocks[v].begin(), blocks[v].end());
    std::sort(issue[v].begin(), issue[v].end());
    const std::string name = variants[v].empty() ? op : op + "/" + variants[v];
    rows.push_back(make_row(name, dtype, count * esize, blocks[v][blocks[v].size() / 2], n, wrong));
    rows.back().host_us = issue[v][issue[v].size() / 2];
  }
  return rows;
}

long long now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// When this process started (Unix ms): /proc/self/stat's start time is in
// clock ticks after boot; CLOCK_BOOTTIME says how long ago that was.
long long process_start_ms() {
  std::ifstream stat("/proc/self/stat");
  std::string line;
  std::getline(stat, line);
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
  }
  timespec boot{};
  clock_gettime(CLOCK_BOOTTIME, &boot);
  const long long since_boot_ms = boot.tv_sec * 1000LL + boot.tv_nsec / 1000000;
  const long long started_ms = std::stoll(field) * 1000 / sysconf(_SC_CLK_TCK);
  return now_ms() - (since_boot_ms - started_ms);
}

// The start-up: init() has returned; one all-reduce of 4 bytes, then the stamps.
int time_startup(Runner& runner, long long process_start) {
  const long long ready = now_ms();
  OpBuffers b{runner.alloc(4), runner.alloc(4), 1, 1, DType::kFloat32};
  runner.time("all_reduce", b, 1);
  const long long first = now_ms();
  runner.release(b.in);
  runner.release(b.out);
  if (runner.rank() == 0)
    std::printf(
        "startup: process started at %lld ms, init returned at %lld ms, first all_reduce "
        "completed at %lld ms\n",
        process_start, ready, first);
  return 0;
}

int run(int argc, char** argv) {
  BenchOptions o;
  try {
    o = parse_bench_options(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collective_bench: %s\n%s\n", e.what(), bench_usage().c_str());
    return 2;
  }
  const long long process_start = process_start_ms();
  std::unique_ptr<Runner> runner = o.mode == "gloo" || o.mode == "mpi"
                                       ? make_host_runner(o.mode)
                                       : make_gpu_runner(o.mode, o.raw_init, o.host_delay_ns);
  const bool leader = runner->rank() == 0;
  if (o.startup) return time_startup(*runner, process_start);
  if (leader) {
    print_header(runner->describe() + ", " + std::to_string(runner->size()) + " ranks, median of " +
                 std::to_string(o.blocks) + " blocks of " + std::to_string(o.iters) + " ops");
  }
  std::unique_ptr<HostSampler> sampler;
  if (leader && !o.sample_host.empty()) {
    sampler = std::make_unique<HostSampler>(
        std::chrono::microseconds(200),
        o.sample_wall ? HostSampler::Clock::kWall : HostSampler::Clock::kThreadCpu);
  }
  std::vector<Row> rows;
  long long total_wrong = 0;
  for (DType dtype : o.dtypes) {
    for (const auto& op : o.ops) {
      for (std::size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
        if (bytes / dtype_size(dtype) < static_cast<std::size_t>(runner->size())) continue;
        for (const Row& row : measure(*runner, o, op, dtype, bytes, sampler.get())) {
          total_wrong += std::max(0LL, row.wrong);
          if (leader) print_row(row);
          rows.push_back(row);
        }
      }
    }
  }
  if (leader && !o.json.empty()) write_json(o.json, o.mode, o.label, runner->size(), rows);
  if (sampler) {
    std::printf("# %d host samples in %s\n", sampler->write(o.sample_host), o.sample_host.c_str());
  }
  if (total_wrong > 0)
    std::fprintf(stderr, "rank %d: %lld wrong elements\n", runner->rank(), total_wrong);
  return total_wrong > 0 ? 1 : 0;
}

}  // namespace
}  // namespace rtd::bench

int main(int argc, char** argv) {
  try {
    return rtd::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collective_bench: %s\n", e.what());
    return 1;
  }
}
