// Persistent collectives on the ranks dtrun started: the all-reduce a DDP's
// buckets run, and the all-gathers and reduce-scatters a sharded model runs
// out of buffers set up once (by copy engines on GPUs of one host). Built
// twice, as collectives_test.cc is: over Gloo with host buffers and over NCCL
// with GPU buffers (RTD_TEST_CUDA). Every rank runs the same tests in order.
#include <gtest/gtest.h>

#ifdef RTD_TEST_CUDA
#include <cuda_runtime_api.h>
#endif

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/multiproc/world.h"

namespace rtd::testing_util {
namespace {

// A persistent all-reduce over buffers of awkward sizes (fewer elements than
// ranks, counts not divisible by the ranks), run several times with new values
// each time, as a DDP's buckets are: every run must see that run's values.
class PersistentReduce : public WorldTest {};

TEST_F(PersistentReduce, EachRunReducesThatRunsValues) {
  const int n = comm().size(), r = comm().rank();
  const std::vector<std::pair<DType, std::size_t>> shapes = {{DType::kFloat32, 1},
                                                             {DType::kFloat32, 3},
                                                             {DType::kFloat32, 4097},
                                                             {DType::kBFloat16, 1001},
                                                             {DType::kFloat16, 999}};
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    for (bool copy_engines : {true, false}) {
      std::vector<std::unique_ptr<Placed>> bufs;
      std::vector<BufferView> views;
      for (auto [dtype, count] : shapes) {
        bufs.push_back(std::make_unique<Placed>(dtype, count));
        views.push_back(bufs.back()->view());
      }
      auto reducer = comm().persistent_all_reduce(views, op, {.copy_engines = copy_engines});
      const bool ce_possible = comm().backend() == "nccl" && n > 1 && copy_engines;
      // On the GPU machine every rank shares one host with peer access, so the
      // copy-engine path must be taken there (the log says why when it is not).
      EXPECT_EQ(reducer->method(), ce_possible ? "copy engines" : "all_reduce");
      for (int bad : {-1, static_cast<int>(views.size())}) {
        try {
          reducer->run(bad);
          ADD_FAILURE() << "run(" << bad << ") must be an error";
        } catch (const Error& e) {
          EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
        }
      }
      for (int run = 0; run < 3; ++run) {
        // Small integers: exact in bfloat16, and so are their sums.
        auto value = [&](int rank, std::size_t j) { return (rank + 1) + double(j % 7) + run; };
        for (auto& b : bufs) {
          for (std::size_t j = 0; j < b->host.count; ++j) b->host.set(j, value(r, j));
          b->push();
        }
        std::vector<std::shared_ptr<Work>> works;
        for (int i = 0; i < static_cast<int>(bufs.size()); ++i) works.push_back(reducer->run(i));
        for (auto& w : works) w->wait();
        for (std::size_t i = 0; i < bufs.size(); ++i) {
          bufs[i]->pull();
          for (std::size_t j = 0; j < bufs[i]->host.count; ++j) {
            double want = 0;
            for (int k = 0; k < n; ++k) want += value(k, j);
            if (op == ReduceOp::kAvg) want /= n;
            const double tol = dtype_size(bufs[i]->host.dtype) == 2 ? 0.02 * want : 1e-5 * want;
            ASSERT_NEAR(bufs[i]->host.get(j), want, tol)
                << reducer->method() << " run " << run << " buffer " << i << " element " << j;
          }
        }
      }
    }
  }
}

#ifdef RTD_TEST_CUDA
// [Capture] A copy-engine run counts its calls on the host (its flags'
// epoch), which a replay of a CUDA graph would not: inside a capture it is
// refused, naming why, before it enqueues anything, so the capture itself
// stays usable; eager runs afterwards are right.
TEST_F(PersistentReduce, ACopyEngineRunInsideACaptureIsRefusedAndTheCaptureStaysUsable) {
  const int n = comm().size(), r = comm().rank();
  Placed buf(DType::kFloat32, 4097);
  std::vector<BufferView> views{buf.view()};
  auto reducer = comm().persistent_all_reduce(views, ReduceOp::kSum, {.copy_engines = true});
  if (reducer->method() != "copy engines") GTEST_SKIP() << "needs 2+ GPUs of one host";
  cudaStream_t caller = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(caller, cudaStreamCaptureModeGlobal), cudaSuccess);
  try {
    reducer->run(0, StreamRef{caller});
    ADD_FAILURE() << "a copy-engine run inside a capture must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("CUDA graph"), std::string::npos) << e.what();
  }
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(caller, &graph), cudaSuccess) << "the capture was broken";
  if (graph) cudaGraphDestroy(graph);
  for (std::size_t j = 0; j < buf.host.count; ++j) buf.host.set(j, r + 1.0);
  buf.push();
  reducer->run(0, StreamRef{caller})->wait();
  buf.pull();
  EXPECT_EQ(buf.host.get(4096), n * (n + 1) / 2.0);
  cudaStreamDestroy(caller);
}
#endif

// Persistent all-gathers and reduce-scatters out of two sources (float32 and
// bfloat16, blocks of an odd element count), in place and not, run several
// times with new values, an all-gather and a reduce-scatter in flight at
// once: every run must see that run's values. This is how a sharded model
// gathers its parameters and reduces its gradients.
class PersistentShard : public WorldTest {};

TEST_F(PersistentShard, EachRunMovesThatRunsValues) {
  const int n = comm().size(), r = comm().rank();
  const std::size_t k = 1001;  // elements per rank's block
  // Small integers: exact in bfloat16, and so are their sums.
  auto value = [](int rank, std::size_t j, int run) { return (rank + 1) + double(j % 7) + run; };
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    for (bool copy_engines : {true, false}) {
      Placed a(DType::kFloat32, 2 * n * k), b(DType::kBFloat16, n * k);
      Placed gathered(DType::kFloat32, n * k), reduced(DType::kFloat32, k);
      auto gatherer = comm().persistent_all_gather({a.view(), b.view()}, {copy_engines});
      auto scatterer = comm().persistent_reduce_scatter({a.view(), b.view()}, op, {copy_engines});
      const bool ce = comm().backend() == "nccl" && n > 1 && copy_engines;
      EXPECT_EQ(gatherer->method(), ce ? "copy engines" : "all_gather");
      EXPECT_EQ(scatterer->method(), ce ? "copy engines" : "reduce_scatter");
      try {
        gatherer->run(gathered.view(0, k), b.view());  // not in a source
        ADD_FAILURE() << "an input outside the sources must be an error";
      } catch (const Error& e) {
        EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument) << e.what();
      }
      auto reduced_value = [&](std::size_t first, std::size_t j, int run) {
        double want = 0;
        for (int p = 0; p < n; ++p) want += value(p, first + j, run);
        return op == ReduceOp::kAvg ? want / n : want;
      };
      auto expect_near = [&](double got, double want, DType dtype, const std::string& what) {
        const double tol = dtype == DType::kBFloat16 ? 0.02 * want : 1e-5 * want;
        ASSERT_NEAR(got, want, tol) << what;
      };
      for (int run = 0; run < 3; ++run) {
        for (std::size_t j = 0; j < a.host.count; ++j) a.host.set(j, value(r, j, run));
        for (std::size_t j = 0; j < k; ++j) b.host.set(r * k + j, value(r, j, run));
        a.push();
        b.push();
        // Gather [k, 2k) of a while reduce-scattering [nk, 2nk) of a.
        auto g = gatherer->run(a.view(k, k), gathered.view());
        auto rs = scatterer->run(a.view(n * k, n * k), reduced.view());
        g->wait();
        rs->wait();
        gatherer->run(b.view(r * k, k), b.view())->wait();  // in place
        gathered.pull();
        reduced.pull();
        b.pull();
        const std::string at = std::string(gatherer->method()) + " run " + std::to_string(run);
        for (int p = 0; p < n; ++p) {
          for (std::size_t j = 0; j < k; ++j) {
            ASSERT_EQ(gathered.host.get(p * k + j), value(p, k + j, run)) << at << " rank " << p;
            ASSERT_EQ(b.host.get(p * k + j), value(p, j, run)) << at << " in place, rank " << p;
          }
        }
        for (std::size_t j = 0; j < k; ++j)
          expect_near(reduced.host.get(j), reduced_value(n * k + r * k, j, run), DType::kFloat32,
                      at + " reduce_scatter element " + std::to_string(j));
        // In place, in bfloat16: this rank's block of b becomes the reduction.
        for (int p = 0; p < n; ++p)
          for (std::size_t j = 0; j < k; ++j) b.host.set(p * k + j, value(r, p * k + j, run));
        b.push();
        scatterer->run(b.view(), b.view(r * k, k))->wait();
        b.pull();
        for (std::size_t j = 0; j < k; ++j)
          expect_near(b.host.get(r * k + j), reduced_value(r * k, j, run), DType::kBFloat16,
                      at + " in-place bfloat16 reduce_scatter element " + std::to_string(j));
      }
    }
  }
}

// An all-gather landing each rank's block in several outputs: the block is
// two tensors' shards end to end, and each lands in its own tensor, as an
// FSDP unit's parameters are gathered with no copy out of the buffer.
TEST_F(PersistentShard, GatherBlocksLandInEachOutput) {
  const int n = comm().size(), r = comm().rank();
  const std::size_t k = 333;  // elements of each share
  auto value = [](int rank, std::size_t j, int run) { return (rank + 1) * 1000 + double(j) + run; };
  for (bool copy_engines : {true, false}) {
    Placed a(DType::kFloat32, 2 * n * k), x(DType::kFloat32, n * k), y(DType::kFloat32, n * k);
    auto gatherer = comm().persistent_all_gather({a.view()}, {copy_engines});
    const bool gpu = comm().backend() == "nccl";
    EXPECT_EQ(gatherer->gathers_blocks(), !gpu || (copy_engines && n > 1));
    if (!gatherer->gathers_blocks()) {
      EXPECT_THROW(gatherer->gather_blocks({x.view(), y.view()}), Error);
      continue;
    }
    for (int run = 0; run < 2; ++run) {
      for (std::size_t j = 0; j < 2 * k; ++j) a.host.set(r * 2 * k + j, value(r, j, run));
      a.push();
      gatherer->gather_blocks({x.view(), y.view()})->wait();
      x.pull();
      y.pull();
      for (int p = 0; p < n; ++p) {
        for (std::size_t j = 0; j < k; ++j) {
          ASSERT_EQ(x.host.get(p * k + j), value(p, j, run)) << "rank " << p << " run " << run;
          ASSERT_EQ(y.host.get(p * k + j), value(p, k + j, run)) << "rank " << p << " run " << run;
        }
      }
    }
    // Shares that do not fill a block are refused on every rank, before any transfer.
    try {
      gatherer->gather_blocks({x.view()});
      ADD_FAILURE() << "shares of half a block must be an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("blocks of"), std::string::npos) << e.what();
    }
  }
}

// A source freed and allocated again, as a caching allocator's block that
// went back to it comes out again, is no longer the memory peers mapped, even
// at the same address: the set-up says so, and the caller sets up afresh.
TEST_F(PersistentShard, ASourceAllocatedAgainIsToldApart) {
  const int n = comm().size();
  const std::size_t k = 1 << 16;
  const bool mapped = comm().backend() == "nccl" && n > 1;  // copy engines
  auto first = std::make_unique<Placed>(DType::kFloat32, n * k);
  auto gatherer = comm().persistent_all_gather({first->view()}, {true});
  const bool by_copy_engines = gatherer->method() == "copy engines";
  EXPECT_EQ(by_copy_engines, mapped) << gatherer->method();
  EXPECT_TRUE(gatherer->sources_unchanged());
  comm().barrier()->wait();  // every peer has mapped it
  const void* before = first->view().data;
  first.reset();
  Placed again(DType::kFloat32, n * k);  // most often where the first was
  EXPECT_EQ(gatherer->sources_unchanged(), !by_copy_engines)
      << "freed and allocated again, " << (again.view().data == before ? "at" : "not at")
      << " the same address";
  gatherer.reset();
  comm().barrier()->wait();  // no rank frees its set-up while a peer still maps it
}

}  // namespace
}  // namespace rtd::testing_util
