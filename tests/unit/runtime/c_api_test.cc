// The C interface (rt_dist/c_api.h) as a ctypes caller uses it: a Gloo
// communicator over store callbacks, collectives on raw pointers, groups,
// and failures reported through rtd_last_error, never thrown.
#include "rt_dist/c_api.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "rt_dist/store.h"

namespace rtd {
namespace {

// The callbacks over one in-memory store that every rank's thread shares.
struct Callbacks {
  std::shared_ptr<Store> store = make_memory_store();
  rtd_store_ops ops{};
  Callbacks() {
    ops.self = this;
    ops.set = [](void* self, const char* key, const void* value, size_t len) {
      static_cast<Callbacks*>(self)->store->set(key,
                                                std::string(static_cast<const char*>(value), len));
      return 0;
    };
    ops.get = [](void* self, const char* key, int64_t timeout_ms, void* reply) {
      try {
        std::string v =
            static_cast<Callbacks*>(self)->store->get(key, std::chrono::milliseconds(timeout_ms));
        rtd_store_reply(reply, v.data(), v.size());
        return 0;
      } catch (...) {
        return 1;
      }
    };
    ops.add = [](void* self, const char* key, int64_t delta, int64_t* result) {
      *result = static_cast<Callbacks*>(self)->store->add(key, delta);
      return 0;
    };
    ops.check = [](void* self, const char* key, int* exists) {
      *exists = static_cast<Callbacks*>(self)->store->check({key}) ? 1 : 0;
      return 0;
    };
    ops.remove = [](void* self, const char* key) {
      static_cast<Callbacks*>(self)->store->remove(key);
      return 0;
    };
  }
};

// Runs body(rank, comm) on `size` Gloo ranks, one thread each.
template <typename Body>
void on_ranks(int size, Body body) {
  Callbacks cb;
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      rtd_comm* comm = rtd_comm_create(&cb.ops, "gloo", "test", r, size, -1, "127.0.0.1", 20000, 0);
      ASSERT_NE(comm, nullptr) << rtd_last_error();
      body(r, comm);
      rtd_comm_destroy(comm);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(CApi, VersionMatchesTheHeader) { EXPECT_EQ(rtd_c_api_version(), RTD_C_API_VERSION); }

TEST(CApi, CollectivesOnRawPointers) {
  on_ranks(2, [](int r, rtd_comm* comm) {
    std::vector<float> x(5, float(r + 1));
    rtd_work* w = rtd_all_reduce(comm, x.data(), x.data(), 5, RTD_FLOAT32, RTD_SUM, -1, nullptr);
    ASSERT_NE(w, nullptr) << rtd_last_error();
    EXPECT_EQ(rtd_work_wait(w, -1), 0) << rtd_last_error();
    EXPECT_EQ(rtd_work_done(w), 1);
    EXPECT_EQ(rtd_work_error(w), 0);
    rtd_work_free(w);
    EXPECT_EQ(x, std::vector<float>(5, 3.0f));

    std::vector<int64_t> mine{r * 10, r * 10 + 1}, all(4);
    w = rtd_all_gather(comm, mine.data(), all.data(), 2, RTD_INT64, -1, nullptr);
    ASSERT_NE(w, nullptr) << rtd_last_error();
    EXPECT_EQ(rtd_work_wait(w, 10000), 0) << rtd_last_error();
    rtd_work_free(w);
    EXPECT_EQ(all, (std::vector<int64_t>{0, 1, 10, 11}));

    // A group: two all-reduces and a send/receive pair, one Work.
    std::vector<double> a(3, 1.0), b(2, 2.0), token{double(r)}, got{-1};
    rtd_op ops[4] = {
        {RTD_OP_ALL_REDUCE, a.data(), a.data(), 3, RTD_FLOAT64, RTD_SUM, 0},
        {RTD_OP_ALL_REDUCE, b.data(), b.data(), 2, RTD_FLOAT64, RTD_MAX, 0},
        {RTD_OP_SEND, token.data(), nullptr, 1, RTD_FLOAT64, 0, 1 - r},
        {RTD_OP_RECV, nullptr, got.data(), 1, RTD_FLOAT64, 0, 1 - r},
    };
    w = rtd_group(comm, ops, 4, -1, nullptr);
    ASSERT_NE(w, nullptr) << rtd_last_error();
    EXPECT_EQ(rtd_work_wait(w, 10000), 0) << rtd_last_error();
    rtd_work_free(w);
    EXPECT_EQ(a, std::vector<double>(3, 2.0));
    EXPECT_EQ(b, std::vector<double>(2, 2.0));
    EXPECT_EQ(got[0], double(1 - r));
  });
}

TEST(CApi, APersistentAllReduceReducesItsBufferAtEachRun) {
  on_ranks(2, [](int r, rtd_comm* comm) {
    std::vector<float> bucket(6, float(r + 1));
    rtd_persistent* p =
        rtd_persistent_all_reduce(comm, bucket.data(), 6, RTD_FLOAT32, RTD_AVG, -1, 1);
    ASSERT_NE(p, nullptr) << rtd_last_error();
    EXPECT_STREQ(rtd_persistent_method(p), "all_reduce");  // Gloo: no copy engines
    for (int run = 0; run < 2; ++run) {
      for (auto& x : bucket) x = float((r + 1) * (run + 1));
      rtd_work* w = rtd_persistent_run(p, nullptr);
      ASSERT_NE(w, nullptr) << rtd_last_error();
      EXPECT_EQ(rtd_work_wait(w, 10000), 0) << rtd_last_error();
      rtd_work_free(w);
      // The mean of 1 and 2, then of 2 and 4.
      EXPECT_EQ(bucket, std::vector<float>(6, 1.5f * float(run + 1)));
    }
    rtd_persistent_free(p);
    EXPECT_EQ(rtd_persistent_run(nullptr, nullptr), nullptr);
    EXPECT_NE(std::string(rtd_last_error()).find("gone"), std::string::npos);
  });
}

TEST(CApi, PersistentShardCollectivesGatherInPlaceAndReduceOutOfTheirBuffer) {
  on_ranks(2, [](int r, rtd_comm* comm) {
    // All-gather: the buffer is the output; each rank writes its own block.
    std::vector<float> gathered(6, -1.0f);
    rtd_persistent* g = rtd_persistent_all_gather(comm, gathered.data(), 6, RTD_FLOAT32, -1, 1);
    ASSERT_NE(g, nullptr) << rtd_last_error();
    EXPECT_STREQ(rtd_persistent_method(g), "all_gather");  // Gloo: no copy engines
    // Reduce-scatter: the buffer is the input; the output lies anywhere.
    std::vector<float> grads(6), mine(3, -1.0f);
    rtd_persistent* s =
        rtd_persistent_reduce_scatter(comm, grads.data(), 6, RTD_FLOAT32, RTD_AVG, -1, 1);
    ASSERT_NE(s, nullptr) << rtd_last_error();
    for (int run = 0; run < 2; ++run) {
      for (int i = 0; i < 3; ++i) gathered[r * 3 + i] = float(10 * r + i + run);
      rtd_work* w =
          rtd_persistent_shard_run(g, gathered.data() + r * 3, gathered.data(), 3, nullptr);
      ASSERT_NE(w, nullptr) << rtd_last_error();
      EXPECT_EQ(rtd_work_wait(w, 10000), 0) << rtd_last_error();
      rtd_work_free(w);
      EXPECT_EQ(gathered, (std::vector<float>{0.0f + run, 1.0f + run, 2.0f + run, 10.0f + run,
                                              11.0f + run, 12.0f + run}));
      for (int i = 0; i < 6; ++i) grads[i] = float((r + 1) * (i + 1) * (run + 1));
      w = rtd_persistent_shard_run(s, grads.data(), mine.data(), 3, nullptr);
      ASSERT_NE(w, nullptr) << rtd_last_error();
      EXPECT_EQ(rtd_work_wait(w, 10000), 0) << rtd_last_error();
      rtd_work_free(w);
      // The mean of (i+1) and 2(i+1), times (run+1), over this rank's block.
      for (int i = 0; i < 3; ++i) EXPECT_EQ(mine[i], 1.5f * float(r * 3 + i + 1) * float(run + 1));
    }
    // An input outside the buffer set up is refused with the reason.
    std::vector<float> elsewhere(6);
    EXPECT_EQ(rtd_persistent_shard_run(s, elsewhere.data(), mine.data(), 3, nullptr), nullptr);
    EXPECT_NE(std::string(rtd_last_error()).find("lies in none of the sources"), std::string::npos)
        << rtd_last_error();
    // The two kinds are not mixed up, and a count out of range is refused.
    EXPECT_EQ(rtd_persistent_run(g, nullptr), nullptr);
    EXPECT_NE(std::string(rtd_last_error()).find("not a persistent all-reduce"), std::string::npos);
    EXPECT_EQ(rtd_persistent_shard_run(s, grads.data(), mine.data(), -1, nullptr), nullptr);
    EXPECT_EQ(rtd_persistent_shard_run(s, grads.data(), mine.data(), INT64_MAX, nullptr), nullptr);
    EXPECT_NE(std::string(rtd_last_error()).find("out of range"), std::string::npos);
    // The gather's blocks landing in two outputs (shares of 2 and 1 elements),
    // and what gather_blocks refuses before anything moves.
    ASSERT_EQ(rtd_persistent_gathers_blocks(g), 1);
    EXPECT_EQ(rtd_persistent_gathers_blocks(s), 0);
    EXPECT_EQ(rtd_persistent_gathers_blocks(nullptr), 0);
    // Host memory maps into no peer: it is never told to set up afresh.
    EXPECT_EQ(rtd_persistent_sources_unchanged(g), 1);
    EXPECT_EQ(rtd_persistent_sources_unchanged(s), 1);
    for (int i = 0; i < 3; ++i) gathered[r * 3 + i] = float(10 * r + i);
    std::vector<float> x(4, -1.0f), y(2, -1.0f);
    void* outs[] = {x.data(), y.data()};
    const int64_t counts[] = {4, 2};
    rtd_work* w = rtd_persistent_gather_blocks(g, outs, counts, 2, nullptr);
    ASSERT_NE(w, nullptr) << rtd_last_error();
    EXPECT_EQ(rtd_work_wait(w, 10000), 0) << rtd_last_error();
    rtd_work_free(w);
    EXPECT_EQ(x, (std::vector<float>{0.0f, 1.0f, 10.0f, 11.0f}));
    EXPECT_EQ(y, (std::vector<float>{2.0f, 12.0f}));
    const int64_t halves[] = {2, 2};
    EXPECT_EQ(rtd_persistent_gather_blocks(g, outs, halves, 2, nullptr), nullptr);
    EXPECT_NE(std::string(rtd_last_error()).find("blocks of"), std::string::npos)
        << rtd_last_error();
    const int64_t negative[] = {-4, 2};
    EXPECT_EQ(rtd_persistent_gather_blocks(g, outs, negative, 2, nullptr), nullptr);
    EXPECT_EQ(rtd_persistent_gather_blocks(g, outs, counts, 0, nullptr), nullptr);
    EXPECT_EQ(rtd_persistent_gather_blocks(s, outs, counts, 2, nullptr), nullptr);
    EXPECT_NE(std::string(rtd_last_error()).find("not a persistent all-gather"), std::string::npos);
    rtd_persistent_free(g);
    rtd_persistent_free(s);
    EXPECT_EQ(rtd_persistent_shard_run(nullptr, nullptr, nullptr, 1, nullptr), nullptr);
    EXPECT_NE(std::string(rtd_last_error()).find("gone"), std::string::npos);
  });
}

TEST(CApi, BadArgumentsFailWithAMessageNotAnException) {
  Callbacks cb;
  EXPECT_EQ(rtd_comm_create(&cb.ops, "mpi", "x", 0, 1, -1, "127.0.0.1", 1000, 0), nullptr);
  EXPECT_NE(std::string(rtd_last_error()).find("'mpi' is not gloo or nccl"), std::string::npos);
  EXPECT_EQ(rtd_last_error_category(), 1);  // invalid argument
  EXPECT_EQ(rtd_comm_create(nullptr, "gloo", "x", 0, 1, -1, "127.0.0.1", 1000, 0), nullptr);
  EXPECT_EQ(rtd_comm_create(&cb.ops, "gloo", "x", 0, 1, -1, "127.0.0.1", 0, 0), nullptr);
  EXPECT_NE(std::string(rtd_last_error()).find("timeout"), std::string::npos);
  EXPECT_EQ(rtd_comm_failed(nullptr), 1);

  on_ranks(1, [](int, rtd_comm* comm) {
    EXPECT_EQ(rtd_comm_stream(comm), nullptr);  // Gloo runs on no CUDA stream
    EXPECT_EQ(rtd_comm_failed(comm), 0);        // its Works carry its failures
    rtd_comm_on_failure(
        comm, [](void*) { ADD_FAILURE() << "Gloo runs no listener"; }, nullptr);
    rtd_comm_on_failure(comm, nullptr, nullptr);
    float x = 1;
    EXPECT_EQ(rtd_all_reduce(comm, &x, &x, 1, 17, RTD_SUM, -1, nullptr), nullptr);
    EXPECT_NE(std::string(rtd_last_error()).find("dtype 17"), std::string::npos);
    EXPECT_EQ(rtd_all_reduce(comm, &x, &x, 1, RTD_FLOAT32, 9, -1, nullptr), nullptr);
    EXPECT_NE(std::string(rtd_last_error()).find("reduction 9"), std::string::npos);
    EXPECT_EQ(rtd_all_reduce(comm, &x, &x, -1, RTD_FLOAT32, RTD_SUM, -1, nullptr), nullptr);
    EXPECT_EQ(rtd_broadcast(comm, &x, 1, RTD_FLOAT32, 5, -1, nullptr), nullptr);
    EXPECT_EQ(rtd_last_error_category(), 1);
    // A bad operation anywhere in a group: nothing of it runs, and the
    // communicator takes the next group as if none had been tried.
    rtd_op ops[2] = {{RTD_OP_ALL_REDUCE, &x, &x, 1, RTD_FLOAT32, RTD_SUM, 0},
                     {42, &x, &x, 1, RTD_FLOAT32, 0, 0}};
    EXPECT_EQ(rtd_group(comm, ops, 2, -1, nullptr), nullptr);
    EXPECT_NE(std::string(rtd_last_error()).find("kind 42"), std::string::npos);
    ops[1] = {RTD_OP_ALL_REDUCE, &x, &x, 1, RTD_FLOAT32, 9, 0};
    EXPECT_EQ(rtd_group(comm, ops, 2, -1, nullptr), nullptr);
    EXPECT_NE(std::string(rtd_last_error()).find("reduction 9"), std::string::npos);
    rtd_work* g = rtd_group(comm, ops, 1, -1, nullptr);
    ASSERT_NE(g, nullptr) << rtd_last_error();
    EXPECT_EQ(rtd_work_wait(g, 1000), 0);
    rtd_work_free(g);
    // A success clears the thread's error.
    rtd_work* w = rtd_all_reduce(comm, &x, &x, 1, RTD_FLOAT32, RTD_SUM, -1, nullptr);
    ASSERT_NE(w, nullptr);
    EXPECT_STREQ(rtd_last_error(), "");
    EXPECT_EQ(rtd_work_wait(w, 1000), 0);
    rtd_work_free(w);
  });
  EXPECT_EQ(rtd_all_reduce(nullptr, nullptr, nullptr, 1, RTD_FLOAT32, RTD_SUM, -1, nullptr),
            nullptr);
  EXPECT_NE(std::string(rtd_last_error()).find("communicator is gone"), std::string::npos);
}

}  // namespace
}  // namespace rtd
