// What one small all-reduce costs the host through librt_dist's C interface
// (runtime/include/rt_dist/c_api.h), the floor under the rtd backend of
// torch.distributed (bench/torch_call_cost.py measures the backend in the
// same way). One process, one rank, on GPU 0 (NCCL) or on the host (Gloo):
//   c_api_cost [--calls N] [--device cuda|cpu]
// Prints the host time to issue one 4-byte all-reduce (and free its Work),
// and the time per call to the last one done, as bench/torch_call_cost.py.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "rt_dist/c_api.h"

namespace {

// A store for one process: what NCCL's bootstrap sets, it gets.
std::map<std::string, std::string> g_keys;
int set(void*, const char* key, const void* value, size_t len) {
  g_keys[key].assign(static_cast<const char*>(value), len);
  return 0;
}
int get(void*, const char* key, int64_t, void* reply) {
  auto it = g_keys.find(key);
  if (it == g_keys.end()) return 1;
  rtd_store_reply(reply, it->second.data(), it->second.size());
  return 0;
}
int add(void*, const char* key, int64_t delta, int64_t* result) {
  std::string& v = g_keys[key];
  *result = (v.empty() ? 0 : std::stoll(v)) + delta;
  v = std::to_string(*result);
  return 0;
}
int check(void*, const char* key, int* exists) {
  *exists = g_keys.count(key) != 0 ? 1 : 0;
  return 0;
}
int remove_key(void*, const char* key) {
  g_keys.erase(key);
  return 0;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  int calls = 5000;
  bool cuda = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--calls") == 0) calls = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--device") == 0) cuda = std::strcmp(argv[i + 1], "cpu") != 0;
  }
  rtd_store_ops ops{nullptr, set, get, add, check, remove_key};
  rtd_comm_options options{};
  options.inline_bytes = 0;  // as the rtd backend makes its communicators
  options.stream_priority = 1;
  rtd_comm* comm = rtd_comm_create_with(&ops, cuda ? "nccl" : "gloo", "c_api_cost", 0, 1,
                                        cuda ? 0 : -1, nullptr, 60000, &options);
  if (comm == nullptr) {
    std::fprintf(stderr, "c_api_cost: %s\n", rtd_last_error());
    return 1;
  }
  float host_value = 1;
  void* data = &host_value;
  cudaStream_t stream = nullptr;
  if (cuda) {
    cudaSetDevice(0);
    cudaMalloc(&data, sizeof(float));
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  }
  auto one = [&] {
    rtd_work* w = rtd_all_reduce(comm, data, data, 1, RTD_FLOAT32, RTD_SUM, cuda ? 0 : -1, stream);
    if (w == nullptr) {
      std::fprintf(stderr, "c_api_cost: %s\n", rtd_last_error());
      std::exit(1);
    }
    if (!cuda) rtd_work_wait(w, 60000);
    rtd_work_free(w);
  };
  for (int i = 0; i < 200; ++i) one();
  if (cuda) cudaStreamSynchronize(stream);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) one();
  const double issued = seconds_since(start);
  if (cuda) cudaStreamSynchronize(stream);
  const double done = seconds_since(start);
  std::printf("call_cost %s c_api: rtd_all_reduce 4 B issued in %6.1f us, done %6.1f us a call\n",
              cuda ? "cuda" : "cpu", issued / calls * 1e6, done / calls * 1e6);
  rtd_comm_destroy(comm);
  return 0;
}
