// [Copy engines, traced] The copy-engine all-reduce and all-gather, set up
// directly on a CommState (no NCCL communicator), between ranks that share
// GPUs: on a machine with one GPU, both ranks use it (CUDA IPC between two
// processes on one device), so the copy-engine path and its trace spans run
// where NCCL would refuse two ranks per GPU. The sums must be exact, and with
// RTD_TRACE_DIR this rank's trace must hold a span per copy with each peer
// and per addition, each inside the host's span of its collective.
//   dtrun --nproc-per-node=2 --env RTD_TRACE_DIR=DIR gpu_ce_shared_test
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "collectives/factory.h"
#include "collectives/nccl/ce_all_reduce.h"
#include "collectives/nccl/ce_push_collective.h"
#include "collectives/nccl/ce_shard_collective.h"
#include "rt_dist/rt_dist.h"
#include "rt_dist/trace.h"
#include "tests/gpu/spin_kernel.h"
#include "tests/testing/gpu_required.h"

namespace rtd::nccl {
namespace {

std::shared_ptr<Context> g_ctx;
std::string g_skip;

struct Span {
  std::string name, cat;
  long long ts, dur;
};

// The complete ("X") events of a rank's trace file, one per line as written.
std::vector<Span> read_spans(const std::string& path) {
  std::ifstream in(path);
  std::vector<Span> out;
  const std::regex event(
      R"re("ph":"X".*"name":"([^"]*)","cat":"([^"]*)","ts":(-?[0-9]+),"dur":(-?[0-9]+))re");
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (std::regex_search(line, m, event))
      out.push_back({m[1], m[2], std::stoll(m[3]), std::stoll(m[4])});
  }
  return out;
}

class CopyEnginesSharedGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!g_ctx) GTEST_SKIP() << g_skip;
    rank_ = g_ctx->rank();
    size_ = g_ctx->world_size();
    int gpus = 0;
    ASSERT_EQ(cudaGetDeviceCount(&gpus), cudaSuccess);
    device_ = g_ctx->local_rank() % gpus;
    ASSERT_EQ(cudaSetDevice(device_), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    state_ = std::make_shared<CommState>(real_nccl_api(), real_cuda_api(), rank_,
                                         std::chrono::seconds(60));
    state_->set_recorder(std::make_shared<FlightRecorder>(nullptr, rank_, size_));
  }
  void TearDown() override {
    if (stream_) cudaStreamDestroy(stream_);
  }
  CeSetup setup(const std::string& name, std::vector<BufferView> buffers) {
    static std::shared_ptr<Store> store(&g_ctx->store(), [](Store*) {});
    scoped_ = make_prefix_store("ce_shared/" + name + "/", store);
    return CeSetup{.state = state_,
                   .store = scoped_.get(),
                   .rank = rank_,
                   .size = size_,
                   .device = device_,
                   .buffers = std::move(buffers),
                   .op = ReduceOp::kSum,
                   .timeout = std::chrono::seconds(60)};
  }
  BufferView floats(float* p, std::size_t n) {
    return BufferView{.data = p,
                      .count = n,
                      .dtype = DType::kFloat32,
                      .device = DeviceType::kCuda,
                      .device_index = device_};
  }

  int rank_ = 0, size_ = 1, device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<CommState> state_;
  std::shared_ptr<Store> scoped_;
};

TEST_F(CopyEnginesSharedGpu, AllReduceAndAllGatherAreExactAndEachCopyIsTraced) {
  const std::size_t n = std::size_t(1) << 22;  // 16 MiB of float32
  float *sum = nullptr, *parts = nullptr;
  ASSERT_EQ(cudaMalloc(&sum, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&parts, n * sizeof(float)), cudaSuccess);
  std::vector<float> host(n);
  {
    std::string why;
    auto reducer = CopyEngineAllReduce::create(setup("reduce", {floats(sum, n)}), &why);
    ASSERT_TRUE(reducer) << "the copy-engine all-reduce refused: " << why;
    auto gatherer =
        CopyEngineShardCollective::create(setup("gather", {floats(parts, n)}), true, &why);
    ASSERT_TRUE(gatherer) << "the copy-engine all-gather refused: " << why;
    for (int round = 0; round < 3; ++round) {
      for (std::size_t i = 0; i < n; ++i) host[i] = float(rank_ + 1) * float(i % 1000 + round);
      ASSERT_EQ(cudaMemcpy(sum, host.data(), n * sizeof(float), cudaMemcpyHostToDevice),
                cudaSuccess);
      reducer->run(0, StreamRef{stream_})->wait();
      state_->overdue();  // marks it completed, as a communicator's watchdog would
      ASSERT_EQ(cudaMemcpy(host.data(), sum, n * sizeof(float), cudaMemcpyDeviceToHost),
                cudaSuccess);
      const float ranks_sum = float(size_ * (size_ + 1) / 2);
      for (std::size_t i = 0; i < n; i += 997)
        ASSERT_EQ(host[i], ranks_sum * float(i % 1000 + round)) << "element " << i;

      const std::size_t block = n / size_;
      for (std::size_t i = 0; i < block; ++i) host[i] = float(rank_ * 7 + round);
      ASSERT_EQ(cudaMemcpy(parts + rank_ * block, host.data(), block * sizeof(float),
                           cudaMemcpyHostToDevice),
                cudaSuccess);
      gatherer
          ->run(floats(parts + rank_ * block, block), floats(parts, block * size_),
                StreamRef{stream_})
          ->wait();
      state_->overdue();
      ASSERT_EQ(cudaMemcpy(host.data(), parts, n * sizeof(float), cudaMemcpyDeviceToHost),
                cudaSuccess);
      for (int r = 0; r < size_; ++r)
        ASSERT_EQ(host[r * block + block / 2], float(r * 7 + round)) << "block of rank " << r;
    }
  }  // the collectives go: their pending spans are written into the ring
  cudaFree(sum);
  cudaFree(parts);

  if (!trace::enabled()) GTEST_SKIP() << "RTD_TRACE_DIR is not set: the spans are not checked";
  trace::flush();
  const char* dir = std::getenv("RTD_TRACE_DIR");
  const std::vector<Span> spans =
      read_spans(std::string(dir) + "/rank_" + std::to_string(rank_) + ".json");
  std::vector<Span> calls, gpu;
  for (const Span& s : spans) {
    if (s.cat == "collective") calls.push_back(s);
    if (s.cat == "gpu") gpu.push_back(s);
  }
  EXPECT_EQ(calls.size(), 6u) << "3 all-reduces and 3 all-gathers";
  int copies = 0, additions = 0;
  for (const Span& g : gpu) {
    if (g.name.rfind("copy with rank ", 0) == 0) {
      ++copies;
      EXPECT_NE(g.name, "copy with rank " + std::to_string(rank_)) << "a copy with itself";
    }
    if (g.name == "addition") ++additions;
    bool inside = false;
    for (const Span& c : calls)
      inside = inside || (c.ts - 200 <= g.ts && g.ts + g.dur <= c.ts + c.dur + 200);
    EXPECT_TRUE(inside) << g.name << " at " << g.ts << "+" << g.dur
                        << " lies outside every collective";
    EXPECT_GE(g.dur, 0) << g.name;
  }
  // Per all-reduce: a pull and a push per peer, one addition; per all-gather a pull per peer.
  EXPECT_EQ(copies, 3 * 3 * (size_ - 1));
  EXPECT_EQ(additions, 3);
}

// The copy-engine addition in 16 bits (DDP's and FSDP's float16 and bfloat16
// wires): sums of small integers, exact in either.
TEST_F(CopyEnginesSharedGpu, AllReduceIn16BitsIsExact) {
  const std::size_t n = (std::size_t(1) << 20) + 3;  // an odd tail for the vector path
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    void* buf = nullptr;
    ASSERT_EQ(cudaMalloc(&buf, n * 2), cudaSuccess);
    BufferView view = floats(static_cast<float*>(buf), n);
    view.dtype = dtype;
    std::string why;
    auto reducer = CopyEngineAllReduce::create(
        setup(std::string("reduce16/") + std::string(to_string(dtype)), {view}), &why);
    ASSERT_TRUE(reducer) << "the copy-engine all-reduce refused " << to_string(dtype) << ": "
                         << why;
    std::vector<std::uint16_t> bits(n);
    auto value = [&](std::size_t i, int rank) { return float(rank + 1) * float(i % 64); };
    auto encode = [&](float v) {
      return dtype == DType::kFloat16 ? float_to_f16(v) : float_to_bf16(v);
    };
    auto decode = [&](std::uint16_t b) {
      return dtype == DType::kFloat16 ? f16_to_float(b) : bf16_to_float(b);
    };
    for (std::size_t i = 0; i < n; ++i) bits[i] = encode(value(i, rank_));
    ASSERT_EQ(cudaMemcpy(buf, bits.data(), n * 2, cudaMemcpyHostToDevice), cudaSuccess);
    reducer->run(0, StreamRef{stream_})->wait();
    state_->overdue();
    ASSERT_EQ(cudaMemcpy(bits.data(), buf, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    const float ranks_sum = float(size_ * (size_ + 1) / 2);
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(decode(bits[i]), ranks_sum * float(i % 64)) << to_string(dtype) << " element " << i;
    reducer.reset();
    cudaFree(buf);
  }
}

// The staged sites' collectives (PyTorch's DDP buckets and FSDP2's
// reductions on the rtd backend): buffers the peers never mapped, at a new
// address each call, in place and not, at offsets that break the addition's
// 16-byte loads, counts that do not split evenly, float32 and bfloat16, sum
// and average. Sums of small integers: exact.
TEST_F(CopyEnginesSharedGpu, PushedAllReduceAndReduceScatterAreExactWhereverTheBuffersLie) {
  using Kind = CopyEnginePushCollective::Kind;
  const std::size_t count = (std::size_t(1) << 20) * size_ + 3 * size_;  // splits unevenly in 16 B
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (Kind kind : {Kind::kAllReduce, Kind::kReduceScatter}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        const std::string name = std::string(kind == Kind::kAllReduce ? "ar" : "rs") + "/" +
                                 std::string(to_string(dtype)) + "/" + std::string(to_string(op));
        CeSetup s = setup("push/" + name, {});
        s.op = op;
        std::string why;
        auto push = CopyEnginePushCollective::create(s, kind, count, dtype, &why);
        ASSERT_TRUE(push) << name << ": the pushed collective refused: " << why;
        const std::size_t esize = dtype_size(dtype);
        const std::size_t out_count = kind == Kind::kAllReduce ? count : count / size_;
        // The value of element i on rank r, and what the result must hold.
        auto value = [](std::size_t i, int r, int round) {
          return float((r + 1) * (i % 13 + round));
        };
        const float ranks_sum = float(size_ * (size_ + 1) / 2);
        auto encode = [&](float v, void* at) {
          if (dtype == DType::kFloat32) {
            std::memcpy(at, &v, 4);
          } else {
            const std::uint16_t b = float_to_bf16(v);
            std::memcpy(at, &b, 2);
          }
        };
        auto decode = [&](const void* at) {
          if (dtype == DType::kFloat32) {
            float v;
            std::memcpy(&v, at, 4);
            return v;
          }
          std::uint16_t b;
          std::memcpy(&b, at, 2);
          return bf16_to_float(b);
        };
        for (int round = 0; round < 4; ++round) {
          // Round 1 and 3 in place; 2 and 3 one element off 16 bytes.
          const bool in_place = round % 2 == 1;
          const std::size_t skew = round >= 2 ? 1 : 0;
          char* mem = nullptr;  // a new allocation each round: a new address
          const std::size_t bytes = (count + out_count + 2 * skew) * esize;
          ASSERT_EQ(cudaMalloc(&mem, bytes), cudaSuccess);
          char* in = mem + skew * esize;
          char* out = in_place ? (kind == Kind::kAllReduce ? in : in + rank_ * out_count * esize)
                               : in + (count + skew) * esize;
          std::vector<char> host(count * esize);
          for (std::size_t i = 0; i < count; ++i) encode(value(i, rank_, round), &host[i * esize]);
          ASSERT_EQ(cudaMemcpy(in, host.data(), count * esize, cudaMemcpyHostToDevice),
                    cudaSuccess);
          BufferView vin{.data = in,
                         .count = count,
                         .dtype = dtype,
                         .device = DeviceType::kCuda,
                         .device_index = device_};
          BufferView vout = vin;
          vout.data = out;
          vout.count = out_count;
          push->run(vin, vout, StreamRef{stream_})->wait();
          state_->overdue();
          ASSERT_EQ(cudaMemcpy(host.data(), out, out_count * esize, cudaMemcpyDeviceToHost),
                    cudaSuccess);
          const std::size_t first = kind == Kind::kAllReduce ? 0 : rank_ * out_count;
          for (std::size_t j = 0; j < out_count; ++j) {
            const std::size_t i = first + j;
            const float want = value(i, 0, round) * ranks_sum / (op == ReduceOp::kAvg ? size_ : 1);
            ASSERT_EQ(decode(&host[j * esize]), want)
                << name << ", round " << round << ", element " << i;
          }
          cudaFree(mem);
        }
      }
    }
  }
}

// Calls back to back, nothing waited for between them on the host, while one
// rank's stream lags behind the other's (a spin before its first call): a
// call's pushes must not land in slots that a slower peer has not yet added
// up for the call before (the reduce-scatter's two sets of slots, the
// all-reduce's "reduced" wait), nor a result slot be rewritten under a pull.
TEST_F(CopyEnginesSharedGpu, PushedCallsBackToBackWithALaggingPeerStayExact) {
  using Kind = CopyEnginePushCollective::Kind;
  const std::size_t count = std::size_t(size_) << 18;  // float32, 1 MiB a rank
  const int calls = 8;
  for (Kind kind : {Kind::kReduceScatter, Kind::kAllReduce}) {
    const bool ar = kind == Kind::kAllReduce;
    std::string why;
    auto push = CopyEnginePushCollective::create(setup(ar ? "b2b/ar" : "b2b/rs", {}), kind, count,
                                                 DType::kFloat32, &why);
    ASSERT_TRUE(push) << why;
    const std::size_t out_count = ar ? count : count / size_;
    std::vector<float*> ins(calls), outs(calls);
    std::vector<float> host(count);
    for (int c = 0; c < calls; ++c) {
      ASSERT_EQ(cudaMalloc(&ins[c], count * sizeof(float)), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&outs[c], out_count * sizeof(float)), cudaSuccess);
      for (std::size_t i = 0; i < count; ++i) host[i] = float((rank_ + 1) * (c + 1) + i % 7);
      ASSERT_EQ(cudaMemcpy(ins[c], host.data(), count * sizeof(float), cudaMemcpyHostToDevice),
                cudaSuccess);
    }
    if (rank_ == size_ - 1) launch_spin(stream_, 200'000'000);  // about 0.1 s at H200's clock
    std::vector<std::shared_ptr<Work>> works;
    for (int c = 0; c < calls; ++c)
      works.push_back(
          push->run(floats(ins[c], count), floats(outs[c], out_count), StreamRef{stream_}));
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    for (auto& w : works) w->wait();
    state_->overdue();
    const float ranks_sum = float(size_ * (size_ + 1) / 2);
    for (int c = 0; c < calls; ++c) {
      ASSERT_EQ(cudaMemcpy(host.data(), outs[c], out_count * sizeof(float), cudaMemcpyDeviceToHost),
                cudaSuccess);
      const std::size_t first = ar ? 0 : rank_ * out_count;
      for (std::size_t j = 0; j < out_count; ++j) {
        const std::size_t i = first + j;
        ASSERT_EQ(host[j], ranks_sum * float(c + 1) + float(size_) * float(i % 7))
            << (ar ? "all_reduce" : "reduce_scatter") << " call " << c << ", element " << i;
      }
      cudaFree(ins[c]);
      cudaFree(outs[c]);
    }
  }
}

// A set-up freed while its copies are still queued (a DDP bucket set up
// again, a parked FSDP2 slot that moved, released shard buffers): the host is
// far ahead of the GPU, which spins before the call. The peers' mappings are
// closed only once the queued copies ran: the sum is exact and the stream
// reports no error (before, they were closed under the copies).
TEST_F(CopyEnginesSharedGpu, ASetUpFreedWhileItsCopiesAreQueuedDrainsThemFirst) {
  const std::size_t n = std::size_t(1) << 22;  // 16 MiB of float32
  float* sum = nullptr;
  ASSERT_EQ(cudaMalloc(&sum, n * sizeof(float)), cudaSuccess);
  std::vector<float> host(n);
  for (int round = 0; round < 2; ++round) {
    for (std::size_t i = 0; i < n; ++i) host[i] = float(rank_ + 1) * float(i % 1000 + round);
    ASSERT_EQ(cudaMemcpy(sum, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    std::string why;
    auto reducer = CopyEngineAllReduce::create(
        setup("freed/" + std::to_string(round), {floats(sum, n)}), &why);
    ASSERT_TRUE(reducer) << "the copy-engine all-reduce refused: " << why;
    launch_spin(stream_, 400'000'000);  // about 0.2 s at H200's clock
    auto work = reducer->run(0, StreamRef{stream_});
    const auto freed_at = std::chrono::steady_clock::now();
    reducer.reset();  // the set-up goes, the copies still queued behind the spin
    const auto freeing = std::chrono::steady_clock::now() - freed_at;
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    work.reset();
    state_->overdue();
    ASSERT_EQ(cudaMemcpy(host.data(), sum, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    const float ranks_sum = float(size_ * (size_ + 1) / 2);
    for (std::size_t i = 0; i < n; i += 997)
      ASSERT_EQ(host[i], ranks_sum * float(i % 1000 + round)) << "element " << i;
    std::printf("rank %d round %d: freeing the set-up took %.1f ms (it drains the queued copies)\n",
                rank_, round, std::chrono::duration<double, std::milli>(freeing).count());
  }
  cudaFree(sum);
}

}  // namespace
}  // namespace rtd::nccl

int main(int argc, char** argv) {
  using namespace rtd;
  ::testing::InitGoogleTest(&argc, argv);
  std::string why;
  if (usable_gpu_count(&why) == 0) {
    if (testing_util::gpu_required()) return testing_util::no_gpu_exit(why);
    nccl::g_skip = "GPU test skipped: " + why;
  } else {
    try {
      nccl::g_ctx = init(InitOptions{.backend = Backend::kGloo});
    } catch (const Error& e) {
      std::fprintf(stderr, "init failed: %s\n", e.what());
      return 1;
    }
  }
  int rc = RUN_ALL_TESTS();
  nccl::g_ctx.reset();
  constexpr int kSkipped = 77;  // CTest reports the run as skipped, not passed
  return rc == 0 && !nccl::g_skip.empty() ? kSkipped : rc;
}
