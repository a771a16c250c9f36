// nccl_layer_cost: the host time our NCCL communicator adds to a call, with
// NCCL and CUDA replaced by stand-ins that return at once, so that what is
// timed is our layer alone (its checks, flight recorder, in-flight list,
// Work and events) on any machine, GPU or not. Prints nanoseconds per call
// for the bare stand-in calls a raw NCCL program makes (the collective and,
// for comparison, an end event) and for our communicator's all_reduce,
// all_gather and reduce_scatter, on the caller's stream and on ours; asserts
// nothing.
//   nccl_layer_cost [--calls N] [--blocks B] [--evict KB]
// Each figure is the median and the least of B blocks of N calls.
// --evict KB: every stand-in collective and event record first walks KB of
// memory and jumps through 32 KB of code, as NCCL's and CUDA's own calls do, so that
// our layer runs with the caches as it finds them after NCCL's call (where a
// real call spends most of its time on misses) rather than warm.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "collectives/nccl/nccl_communicator.h"

namespace rtd::nccl {
namespace {

// What the stand-ins walk to evict the caches (--evict); empty: nothing.
std::vector<unsigned char> evict_bytes;

// Jumps through 32 KB of code, a jump a 64-byte line (the first level
// instruction cache's size on most server cores), and touches every line of
// evict_bytes.
__attribute__((noinline)) void evict() {
  if (evict_bytes.empty()) return;
  asm volatile(".rept 512\n jmp 1f\n .fill 62, 1, 0x90\n1:\n .endr" ::: "memory");
  for (std::size_t i = 0; i < evict_bytes.size(); i += 64) evict_bytes[i] += 1;
}

// Handles are made-up pointers; every call succeeds at once.
class NullCudaApi : public CudaApi {
 public:
  cudaError_t get_device_count(int* count) override {
    *count = 1;
    return cudaSuccess;
  }
  cudaError_t set_device(int) override { return cudaSuccess; }
  cudaError_t stream_create(cudaStream_t* s, bool) override {
    *s = reinterpret_cast<cudaStream_t>(0x1000);
    return cudaSuccess;
  }
  cudaError_t stream_destroy(cudaStream_t) override { return cudaSuccess; }
  cudaError_t event_create(cudaEvent_t* e) override {
    *e = reinterpret_cast<cudaEvent_t>(0x2000 + next_++);
    return cudaSuccess;
  }
  cudaError_t event_destroy(cudaEvent_t) override { return cudaSuccess; }
  cudaError_t event_record(cudaEvent_t, cudaStream_t) override {
    evict();
    return cudaSuccess;
  }
  cudaError_t event_query(cudaEvent_t) override { return cudaSuccess; }
  cudaError_t stream_wait_event(cudaStream_t, cudaEvent_t) override { return cudaSuccess; }
  cudaError_t stream_capturing(cudaStream_t, bool* capturing) override {
    *capturing = false;
    return cudaSuccess;
  }
  cudaError_t exchange_capture_mode(cudaStreamCaptureMode*) override { return cudaSuccess; }
  cudaError_t malloc(void** p, size_t) override {
    *p = reinterpret_cast<void*>(0x3000);
    return cudaSuccess;
  }
  cudaError_t free(void*) override { return cudaSuccess; }
  const char* error_string(cudaError_t) override { return "no error"; }

 private:
  std::uintptr_t next_ = 1;
};

class NullNcclApi : public NcclApi {
 public:
  ncclResult_t get_unique_id(ncclUniqueId* id) override {
    std::memset(id->internal, 'u', sizeof(id->internal));
    return ncclSuccess;
  }
  ncclResult_t comm_init_rank_config(ncclComm_t* comm, int, ncclUniqueId, int,
                                     ncclConfig_t*) override {
    *comm = reinterpret_cast<ncclComm_t>(0x4000);
    return ncclSuccess;
  }
  ncclResult_t comm_split(ncclComm_t, int, int, ncclComm_t* out, ncclConfig_t*) override {
    *out = reinterpret_cast<ncclComm_t>(0x5000);
    return ncclSuccess;
  }
  ncclResult_t comm_get_async_error(ncclComm_t, ncclResult_t* state) override {
    *state = ncclSuccess;
    return ncclSuccess;
  }
  ncclResult_t comm_finalize(ncclComm_t) override { return ncclSuccess; }
  ncclResult_t comm_destroy(ncclComm_t) override { return ncclSuccess; }
  ncclResult_t comm_abort(ncclComm_t) override { return ncclSuccess; }
  ncclResult_t comm_user_rank(ncclComm_t, int* rank) override {
    *rank = 0;
    return ncclSuccess;
  }
  ncclResult_t comm_count(ncclComm_t, int* count) override {
    *count = 1;
    return ncclSuccess;
  }
  ncclResult_t group_start() override { return ncclSuccess; }
  ncclResult_t group_end() override { return ncclSuccess; }
  ncclResult_t all_reduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                          cudaStream_t) override {
    evict();
    return ncclSuccess;
  }
  ncclResult_t broadcast(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                         cudaStream_t) override {
    evict();
    return ncclSuccess;
  }
  ncclResult_t reduce_scatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                              cudaStream_t) override {
    evict();
    return ncclSuccess;
  }
  ncclResult_t all_gather(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                          cudaStream_t) override {
    evict();
    return ncclSuccess;
  }
  ncclResult_t send(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) override {
    return ncclSuccess;
  }
  ncclResult_t recv(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) override {
    return ncclSuccess;
  }
  ncclResult_t mem_alloc(void** ptr, size_t) override {
    *ptr = reinterpret_cast<void*>(0x6000);
    return ncclSuccess;
  }
  ncclResult_t mem_free(void*) override { return ncclSuccess; }
  ncclResult_t comm_register(ncclComm_t, void*, size_t, void** handle) override {
    *handle = reinterpret_cast<void*>(0x7000);
    return ncclSuccess;
  }
  ncclResult_t comm_deregister(ncclComm_t, void*) override { return ncclSuccess; }
  const char* error_string(ncclResult_t) override { return "no error"; }
  const char* last_error(ncclComm_t) override { return ""; }
};

// The median and the least over blocks of the nanoseconds per call of
// `calls` runs of body (the least: the figure least disturbed by the rest of
// the machine).
std::pair<double, double> ns_per_call(int blocks, int calls, const std::function<void()>& body) {
  std::vector<double> per_call;
  for (int b = 0; b < blocks; ++b) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) body();
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    per_call.push_back(took.count() / calls);
  }
  std::sort(per_call.begin(), per_call.end());
  return {per_call[blocks / 2], per_call.front()};
}

int run(int argc, char** argv) {
  int calls = 20000;
  int blocks = 21;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--calls") == 0) calls = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--blocks") == 0) blocks = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--evict") == 0)
      evict_bytes.resize(static_cast<std::size_t>(std::max(0, std::atoi(argv[i + 1]))) * 1024);
  }
  auto nccl = std::make_shared<NullNcclApi>();
  auto cuda = std::make_shared<NullCudaApi>();
  auto make = [&](long long inline_bytes) {
    NcclSettings settings;
    settings.inline_bytes = inline_bytes;
    return std::make_unique<NcclCommunicator>(NcclOptions{.store = make_memory_store(),
                                                          .rank = 0,
                                                          .size = 2,  // no one-rank shortcut
                                                          .settings = settings,
                                                          .nccl = nccl,
                                                          .cuda = cuda});
  };
  auto on_caller = make(1 << 20);
  auto on_ours = make(0);
  // Stand-in device buffers: the stand-ins never touch them.
  float* in = reinterpret_cast<float*>(0x10000);
  float* out = reinterpret_cast<float*>(0x20000);
  const std::size_t count = 256;
  const BufferView vin{in, count, DType::kFloat32, DeviceType::kCuda};
  const BufferView vout{out, count, DType::kFloat32, DeviceType::kCuda};
  const BufferView vout2{out, 2 * count, DType::kFloat32, DeviceType::kCuda};
  const BufferView vhalf{out, count / 2, DType::kFloat32, DeviceType::kCuda};
  const StreamRef caller{reinterpret_cast<void*>(0x9000)};
  auto comm = reinterpret_cast<ncclComm_t>(0x4000);
  auto stream = reinterpret_cast<cudaStream_t>(0x9000);
  cudaEvent_t event = nullptr;
  cuda->event_create(&event);

  std::printf("# host ns per call through our NCCL communicator, NCCL and CUDA stood in by\n");
  std::printf("# calls that return at once; %d blocks of %d calls\n", blocks, calls);
  if (!evict_bytes.empty()) {
    std::printf("# each stand-in call first jumps through 32 KB of code and walks %zu KB\n",
                evict_bytes.size() / 1024);
  }
  std::printf("%-34s %10s %10s\n", "what", "median_ns", "least_ns");
  auto row = [&](const char* what, const std::function<void()>& body) {
    ns_per_call(1, calls, body);  // warm-up
    auto [median, least] = ns_per_call(blocks, calls, body);
    std::printf("%-34s %10.1f %10.1f\n", what, median, least);
  };
  row("raw all_reduce",
      [&] { nccl->all_reduce(in, out, count, ncclFloat32, ncclSum, comm, stream); });
  row("raw all_reduce + end event", [&] {
    nccl->all_reduce(in, out, count, ncclFloat32, ncclSum, comm, stream);
    cuda->event_record(event, stream);
  });
  for (auto [name, c] :
       {std::pair<const char*, NcclCommunicator*>{"caller's stream", on_caller.get()},
        {"our stream", on_ours.get()}}) {
    char what[64];
    std::snprintf(what, sizeof(what), "ours all_reduce, %s", name);
    row(what, [&, c = c] { c->all_reduce(vin, vout, ReduceOp::kSum, caller); });
    std::snprintf(what, sizeof(what), "ours all_gather, %s", name);
    row(what, [&, c = c] { c->all_gather(vin, vout2, caller); });
    std::snprintf(what, sizeof(what), "ours reduce_scatter, %s", name);
    row(what, [&, c = c] { c->reduce_scatter(vin, vhalf, ReduceOp::kSum, caller); });
  }
  return 0;
}

}  // namespace
}  // namespace rtd::nccl

int main(int argc, char** argv) { return rtd::nccl::run(argc, argv); }
