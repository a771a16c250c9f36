// The doctor's all-reduce benchmark (bench.h).
#include "launcher/doctor/bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "collectives/device_memory.h"
#include "launcher/doctor/checks.h"
#include "launcher/doctor/facts.h"
#include "launcher/doctor/gpu_probe.h"
#include "rt_dist/rt_dist.h"

namespace rtd::launcher::doctor {
namespace {

// Bus bandwidth (GB/s) of an all-reduce of `bytes` on comm, after warm-ups.
double busbw(Communicator& comm, const BufferView& buf) {
  for (int i = 0; i < 3; ++i) comm.all_reduce(buf, ReduceOp::kSum)->wait();
  constexpr int kIters = 10;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kIters; ++i) comm.all_reduce(buf, ReduceOp::kSum)->wait();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kIters;
  const int n = comm.size();
  return n < 2 ? 0.0 : buf.bytes() / secs / 1e9 * 2.0 * (n - 1) / n;
}

}  // namespace

int run_bench_worker() {
  auto ctx = rtd::init();
  const WorldInfo& w = ctx->world();
  const bool gpu = ctx->comm().backend() == "nccl";
  const std::size_t bytes = gpu ? (256u << 20) : (8u << 20);
  DeviceBuffer buffer(gpu ? DeviceType::kCuda : DeviceType::kCpu, w.local_rank, bytes);
  const BufferView buf{buffer.data(), bytes / 4, DType::kFloat32,
                       gpu ? DeviceType::kCuda : DeviceType::kCpu, w.local_rank};
  zero_async(buf, StreamRef{});
  const double all = busbw(ctx->comm(), buf);
  std::unique_ptr<Communicator> node_comm = ctx->comm().split(w.node_rank, w.local_rank);
  const double within = busbw(*node_comm, buf);
  Store& store = ctx->store();
  if (w.local_rank == 0)
    store.set("doctor/bench/node" + std::to_string(w.node_rank), std::to_string(within));
  if (w.rank != 0) {
    ctx->comm().barrier()->wait();
    return 0;
  }
  // What the links should give (256 MiB): within a node from the GPUs' links
  // (expected_busbw_within); between nodes RDMA 10, sockets 1.
  Facts facts;
  double expect_within = 0, expect_across = 0;
  if (gpu) {
    probe_gpus(facts);
    read_sysfs_facts("", facts);
    expect_within = expected_busbw_within(facts.links, facts.gpus.size());
    bool rdma = false;
    for (const RdmaPort& p : facts.rdma) rdma = rdma || p.state == "ACTIVE";
    expect_across = rdma ? 10 : 1;
  }
  const int nnodes = w.world_size / std::max(1, w.local_world_size);
  std::vector<double> nodes;
  for (int k = 0; k < nnodes; ++k)
    nodes.push_back(
        std::stod(store.get("doctor/bench/node" + std::to_string(k), std::chrono::seconds(60))));
  ctx->comm().barrier()->wait();
  std::printf("doctor --bench: all-reduce of %zu MiB through %s, %d workers on %d node(s)\n",
              bytes >> 20, ctx->comm().backend().c_str(), w.world_size, nnodes);
  int bad = 0;
  auto line = [&](const std::string& what, double gbs, double expect) {
    const bool slow = expect > 0 && gbs > 0 && gbs < 0.5 * expect;
    bad += slow;
    std::printf(
        "  %-28s %8.2f GB/s busbw%s%s\n", what.c_str(), gbs,
        expect > 0 ? (" (the links should give " + std::to_string(int(expect)) + "+)").c_str() : "",
        slow ? "  SLOW" : "");
  };
  if (w.world_size < 2) {
    std::printf("  one worker: nothing moves; run with more to measure\n");
    std::fflush(stdout);
    return 0;
  }
  const double expect_all = nnodes > 1 ? expect_across : expect_within;
  line("every worker", all, expect_all);
  std::vector<double> sorted = nodes;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  for (int k = 0; k < nnodes; ++k) {
    line("within node " + std::to_string(k), nodes[k], expect_within);
    if (nnodes > 1 && nodes[k] < 0.7 * median) {
      std::printf("  node %d is slow: %.2f GB/s within it, the nodes' median is %.2f\n", k,
                  nodes[k], median);
      ++bad;
    }
  }
  std::fflush(stdout);
  return bad > 0 ? 1 : 0;
}

}  // namespace rtd::launcher::doctor
