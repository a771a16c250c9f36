// What CUDA allows around a stream capture, one case per line.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <thread>

__global__ void spin(long long ns, int* out) {
  long long t0 = clock64();
  while (clock64() - t0 < ns) {
  }
  if (out) atomicAdd(out, 1);
}

#define P(x)                                                              \
  do {                                                                    \
    cudaError_t e_ = (x);                                                 \
    std::printf("  %-58s -> %d %s\n", #x, (int)e_, cudaGetErrorName(e_)); \
  } while (0)

static void set_mode(cudaStreamCaptureMode m) { cudaThreadExchangeStreamCaptureMode(&m); }

// Thread A captures on s (mode), thread B does `other` in the middle.
template <typename Other>
void capture_case(const char* name, cudaStreamCaptureMode mode, Other other) {
  std::printf("%s\n", name);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  int* d;
  cudaMalloc(&d, 4);
  cudaMemset(d, 0, 4);
  cudaDeviceSynchronize();
  P(cudaStreamBeginCapture(s, mode));
  spin<<<1, 1, 0, s>>>(1000, d);
  std::thread b([&] { other(s); });
  b.join();
  spin<<<1, 1, 0, s>>>(1000, d);
  cudaGraph_t g = nullptr;
  P(cudaStreamEndCapture(s, &g));
  if (g) {
    cudaGraphExec_t ge;
    P(cudaGraphInstantiate(&ge, g, 0));
    P(cudaGraphLaunch(ge, s));
    P(cudaStreamSynchronize(s));
    int h = 0;
    cudaMemcpy(&h, d, 4, cudaMemcpyDeviceToHost);
    std::printf("  kernels run by one replay: %d (2 expected)\n", h);
    size_t n = 0;
    cudaGraphGetNodes(g, nullptr, &n);
    std::printf("  graph nodes: %zu\n", n);
  }
  P(cudaGetLastError());
  cudaStreamDestroy(s);
  cudaFree(d);
}

int main() {
  cudaFree(0);
  cudaEvent_t done_before;
  cudaEventCreateWithFlags(&done_before, cudaEventDisableTiming);
  cudaEventRecord(done_before, 0);
  cudaDeviceSynchronize();
  for (auto mode : {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal}) {
    std::printf("=== capture mode %s\n",
                mode == cudaStreamCaptureModeGlobal ? "global" : "thread-local");
    capture_case("B records an event on the capturing stream, then queries it", mode,
                 [](cudaStream_t s) {
                   cudaEvent_t e;
                   cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
                   P(cudaEventRecord(e, s));
                   P(cudaEventQuery(e));
                 });
    capture_case("B (relaxed) records on the capturing stream, then queries it", mode,
                 [](cudaStream_t s) {
                   set_mode(cudaStreamCaptureModeRelaxed);
                   cudaEvent_t e;
                   cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
                   P(cudaEventRecord(e, s));
                   P(cudaEventQuery(e));
                 });
    capture_case("B asks whether the stream is capturing", mode, [](cudaStream_t s) {
      cudaStreamCaptureStatus st;
      P(cudaStreamIsCapturing(s, &st));
      std::printf("  status %d\n", (int)st);
    });
    capture_case("B queries an event done before the capture", mode,
                 [&](cudaStream_t) { P(cudaEventQuery(done_before)); });
    capture_case("B (relaxed) queries an event done before the capture", mode, [&](cudaStream_t) {
      set_mode(cudaStreamCaptureModeRelaxed);
      P(cudaEventQuery(done_before));
    });
    capture_case("B queries the capturing stream", mode,
                 [](cudaStream_t s) { P(cudaStreamQuery(s)); });
    capture_case("B records an event on another stream and queries it", mode, [](cudaStream_t) {
      cudaStream_t o;
      cudaStreamCreateWithFlags(&o, cudaStreamNonBlocking);
      cudaEvent_t e;
      cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
      P(cudaEventRecord(e, o));
      P(cudaEventQuery(e));
      cudaStreamDestroy(o);
    });
  }
  std::printf("=== the capturing thread itself (global)\n");
  {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaEvent_t e;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    P(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    spin<<<1, 1, 0, s>>>(1000, nullptr);
    P(cudaEventRecord(e, s));
    P(cudaEventQuery(e));
    P(cudaEventQuery(done_before));
    cudaGraph_t g = nullptr;
    P(cudaStreamEndCapture(s, &g));
    std::printf("  then (after the capture) query of the event recorded in it:\n");
    P(cudaEventQuery(e));
    P(cudaEventRecord(e, s));
    P(cudaStreamSynchronize(s));
    P(cudaEventQuery(e));
    cudaStreamDestroy(s);
  }
  std::printf("=== an event recorded in a capture that ended well\n");
  {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaEvent_t e;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    P(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    spin<<<1, 1, 0, s>>>(1000, nullptr);
    P(cudaEventRecord(e, s));
    spin<<<1, 1, 0, s>>>(1000, nullptr);
    cudaGraph_t g = nullptr;
    P(cudaStreamEndCapture(s, &g));
    P(cudaEventQuery(e));
    cudaGraphExec_t ge;
    P(cudaGraphInstantiate(&ge, g, 0));
    P(cudaGraphLaunch(ge, s));
    P(cudaStreamSynchronize(s));
    P(cudaEventQuery(e));
    cudaStream_t o;
    cudaStreamCreateWithFlags(&o, cudaStreamNonBlocking);
    P(cudaStreamWaitEvent(o, e, 0));
    std::printf("  a second capture on, B (relaxed) queries that event:\n");
    cudaStream_t s2;
    cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    P(cudaStreamBeginCapture(s2, cudaStreamCaptureModeGlobal));
    spin<<<1, 1, 0, s2>>>(1000, nullptr);
    std::thread b([&] {
      set_mode(cudaStreamCaptureModeRelaxed);
      P(cudaEventQuery(e));
    });
    b.join();
    cudaGraph_t g2 = nullptr;
    P(cudaStreamEndCapture(s2, &g2));
    std::printf("  then recorded eagerly again:\n");
    P(cudaEventRecord(e, s));
    P(cudaStreamSynchronize(s));
    P(cudaEventQuery(e));
  }
  // What asking costs the caller's thread.
  {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaStreamCaptureStatus st;
    const int n = 200000;
    for (int r = 0; r < 3; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < n; ++i) cudaStreamIsCapturing(s, &st);
      auto t1 = std::chrono::steady_clock::now();
      unsigned long long id;
      for (int i = 0; i < n; ++i) cudaStreamGetCaptureInfo(s, &st, &id);
      auto t2 = std::chrono::steady_clock::now();
      cudaEvent_t e;
      cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
      for (int i = 0; i < n; ++i) cudaEventRecord(e, s);
      cudaStreamSynchronize(s);
      auto t3 = std::chrono::steady_clock::now();
      auto ns = [&](auto a, auto b) {
        return std::chrono::duration<double, std::nano>(b - a).count() / n;
      };
      std::printf(
          "ns a call: cudaStreamIsCapturing %.1f, cudaStreamGetCaptureInfo %.1f, cudaEventRecord "
          "%.1f\n",
          ns(t0, t1), ns(t1, t2), ns(t2, t3));
    }
  }
  return 0;
}
