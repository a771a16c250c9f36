// What a stream's end marker costs the host: an event record against a
// stream memory operation (a 64-bit write to mapped host memory or to device
// memory), each after an empty kernel launch, in interleaved blocks.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

__global__ void empty() {}

int main() {
  cudaFree(0);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t ev[256];
  for (auto& e : ev) cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  unsigned long long* host = nullptr;
  cudaHostAlloc(&host, 4096, cudaHostAllocMapped);
  CUdeviceptr host_dev = 0;
  cuMemHostGetDevicePointer(&host_dev, host, 0);
  CUdeviceptr dev = 0;
  cuMemAlloc(&dev, 4096);
  int attr = 0;
  CUdevice d;
  cuDeviceGet(&d, 0);
  cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, d);
  std::printf("64-bit stream memops: %d\n", attr);
  const char* names[] = {"launch only",
                         "launch+cuEventRecord",
                         "launch+cudaEventRecord",
                         "launch+writeValue64 host",
                         "launch+writeValue64 dev",
                         "launch+writeValue32 host"};
  constexpr int kModes = 6, kIters = 200, kBlocks = 41;
  std::vector<double> per[kModes];
  unsigned long long seq = 0;
  for (int b = 0; b < kBlocks; ++b) {
    for (int m = 0; m < kModes; ++m) {
      cudaStreamSynchronize(s);
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kIters; ++i) {
        empty<<<1, 32, 0, s>>>();
        ++seq;
        switch (m) {
          case 1:
            cuEventRecord(ev[i & 255], s);
            break;
          case 2:
            cudaEventRecord(ev[i & 255], s);
            break;
          case 3:
            cuStreamWriteValue64(s, host_dev, seq, 0);
            break;
          case 4:
            cuStreamWriteValue64(s, dev, seq, 0);
            break;
          case 5:
            cuStreamWriteValue32(s, host_dev + 8, (cuuint32_t)seq, 0);
            break;
        }
      }
      auto t1 = std::chrono::steady_clock::now();
      if (b > 0)
        per[m].push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / kIters);
    }
  }
  cudaStreamSynchronize(s);
  std::printf("last host value %llu (written %llu)\n", host[0], seq);
  for (int m = 0; m < kModes; ++m) {
    std::sort(per[m].begin(), per[m].end());
    std::printf("%-28s median %7.1f ns  p10 %7.1f  p90 %7.1f\n", names[m],
                per[m][per[m].size() / 2], per[m][per[m].size() / 10],
                per[m][per[m].size() * 9 / 10]);
  }
  std::printf("errors: %s\n", cudaGetErrorName(cudaGetLastError()));
  return 0;
}
