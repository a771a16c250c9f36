// GPU halves of DeviceBuffer, zero and cast (collectives/device_memory.h), and
// the copy-engine all-reduce's addition (collectives/nccl/ce_kernels.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <string>
#include <thread>

#include "collectives/device_memory.h"
#include "collectives/nccl/ce_kernels.h"
#include "rt_dist/error.h"

namespace rtd {
namespace {

// An element as float32, and back (float32, bfloat16 or float16).
__device__ float load_f32(const float* p, size_t i) { return p[i]; }
__device__ float load_f32(const __nv_bfloat16* p, size_t i) { return __bfloat162float(p[i]); }
__device__ float load_f32(const __half* p, size_t i) { return __half2float(p[i]); }
__device__ void store_f32(float* p, size_t i, float v) { p[i] = v; }
__device__ void store_f32(__nv_bfloat16* p, size_t i, float v) { p[i] = __float2bfloat16_rn(v); }
__device__ void store_f32(__half* p, size_t i, float v) { p[i] = __float2half_rn(v); }

}  // namespace
}  // namespace rtd

namespace rtd::gpu {
namespace {

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    throw Error(ErrorCategory::kBackend,
                std::string(what) + ": CUDA error " + cudaGetErrorString(rc), rc);
  }
}

template <typename In, typename Out>
__global__ void k_cast(const In* in, Out* out, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    store_f32(out, i, load_f32(in, i));
  }
}

unsigned blocks_for(size_t n) {
  size_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 4096 ? (b == 0 ? 1 : b) : 4096);
}

}  // namespace

void* allocate(int device, std::size_t bytes) {
  int current = 0;
  check(cudaGetDevice(&current), "reading the current GPU");
  check(cudaSetDevice(device), "selecting the GPU");
  void* p = nullptr;
  cudaError_t rc = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  cudaSetDevice(current);  // the caller's current device stays as it was
  check(
      rc,
      ("allocating " + std::to_string(bytes) + " bytes on GPU " + std::to_string(device)).c_str());
  return p;
}

std::size_t free_bytes(int device) {
  int current = 0;
  check(cudaGetDevice(&current), "reading the current GPU");
  check(cudaSetDevice(device), "selecting the GPU");
  std::size_t free = 0, total = 0;
  cudaError_t rc = cudaMemGetInfo(&free, &total);
  cudaSetDevice(current);
  check(rc, "reading the GPU's free memory");
  return free;
}

void release(void* ptr) { cudaFree(ptr); }

namespace {
// Runs fn with `device` current, the caller's current device restored after.
template <typename Fn>
void on_device(int device, Fn&& fn) {
  int current = 0;
  check(cudaGetDevice(&current), "reading the current GPU");
  check(cudaSetDevice(device), "selecting the GPU");
  cudaError_t rc = fn();
  cudaSetDevice(current);
  check(rc, "copying between the GPU and the host");
}
}  // namespace

void copy_to_host(const void* gpu_src, void* host_dst, std::size_t bytes, int device) {
  on_device(device, [&] { return cudaMemcpy(host_dst, gpu_src, bytes, cudaMemcpyDeviceToHost); });
}

void copy_from_host(const void* host_src, void* gpu_dst, std::size_t bytes, int device) {
  on_device(device, [&] { return cudaMemcpy(gpu_dst, host_src, bytes, cudaMemcpyHostToDevice); });
}

void* allocate_pinned(std::size_t bytes) {
  void* p = nullptr;
  check(cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocDefault),
        "allocating pinned memory");
  return p;
}

void release_pinned(void* ptr) {
  if (ptr) cudaFreeHost(ptr);
}

namespace {
cudaStream_t cuda(StreamRef s) { return static_cast<cudaStream_t>(s.cuda_stream); }
cudaEvent_t event(void* e) { return static_cast<cudaEvent_t>(e); }

// Blocks the calling thread until e's work is done, polling, so that only
// this thread waits (never a synchronize of a stream).
void poll(void* e) {
  cudaError_t rc;
  while ((rc = cudaEventQuery(event(e))) == cudaErrorNotReady)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  check(rc, "copying between the GPU and the host");
}
}  // namespace

CopyStream::CopyStream(int device, int events) : device_(device), events_(events, nullptr) {
  on_device(device, [&] {
    cudaStream_t s = nullptr;
    cudaError_t rc = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    stream_ = s;
    cudaEvent_t e = nullptr;
    for (void** slot : {&entry_, &done_}) {
      if (rc == cudaSuccess) rc = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
      if (rc == cudaSuccess) *slot = e;
    }
    for (void*& slot : events_) {
      if (rc == cudaSuccess) rc = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
      if (rc == cudaSuccess) slot = e;
    }
    return rc;
  });
}

CopyStream::~CopyStream() {
  // No copy may still run into or out of memory its owner is about to free.
  if (stream_ && done_ &&
      cudaEventRecord(event(done_), static_cast<cudaStream_t>(stream_)) == cudaSuccess)
    while (cudaEventQuery(event(done_)) == cudaErrorNotReady)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  for (void* e : events_)
    if (e) cudaEventDestroy(event(e));
  for (void* e : {entry_, done_})
    if (e) cudaEventDestroy(event(e));
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void CopyStream::after(StreamRef stream) {
  on_device(device_, [&] {
    cudaError_t rc = cudaEventRecord(event(entry_), cuda(stream));
    return rc == cudaSuccess
               ? cudaStreamWaitEvent(static_cast<cudaStream_t>(stream_), event(entry_), 0)
               : rc;
  });
}

void CopyStream::mark(int k, StreamRef stream) {
  on_device(device_, [&] { return cudaEventRecord(event(events_.at(k)), cuda(stream)); });
}

void CopyStream::after_mark(int k) {
  on_device(device_, [&] {
    return cudaStreamWaitEvent(static_cast<cudaStream_t>(stream_), event(events_.at(k)), 0);
  });
}

void CopyStream::to_host(const void* gpu_src, void* host_dst, std::size_t bytes) {
  on_device(device_, [&] {
    return cudaMemcpyAsync(host_dst, gpu_src, bytes, cudaMemcpyDeviceToHost,
                           static_cast<cudaStream_t>(stream_));
  });
}

void CopyStream::to_device(const void* host_src, void* gpu_dst, std::size_t bytes) {
  on_device(device_, [&] {
    return cudaMemcpyAsync(gpu_dst, host_src, bytes, cudaMemcpyHostToDevice,
                           static_cast<cudaStream_t>(stream_));
  });
}

void CopyStream::record(int k) {
  on_device(device_, [&] {
    return cudaEventRecord(event(events_.at(k)), static_cast<cudaStream_t>(stream_));
  });
}

void CopyStream::order(int k, StreamRef stream) {
  on_device(device_, [&] { return cudaStreamWaitEvent(cuda(stream), event(events_.at(k)), 0); });
}

void CopyStream::sync(int k) { poll(events_.at(k)); }

void CopyStream::before(StreamRef stream) {
  on_device(device_, [&] {
    cudaError_t rc = cudaEventRecord(event(done_), static_cast<cudaStream_t>(stream_));
    return rc == cudaSuccess ? cudaStreamWaitEvent(cuda(stream), event(done_), 0) : rc;
  });
}

void CopyStream::wait() {
  on_device(device_,
            [&] { return cudaEventRecord(event(done_), static_cast<cudaStream_t>(stream_)); });
  poll(done_);
}

void zero_async(void* ptr, std::size_t bytes, StreamRef stream) {
  check(cudaMemsetAsync(ptr, 0, bytes, static_cast<cudaStream_t>(stream.cuda_stream)), "zeroing");
}

StreamPoint::StreamPoint(StreamRef stream) {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "creating an event");
  event_ = e;
  check(cudaEventRecord(e, static_cast<cudaStream_t>(stream.cuda_stream)),
        "recording the stream's point");
}

StreamPoint::~StreamPoint() {
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

bool StreamPoint::reached() {
  cudaError_t rc = cudaEventQuery(static_cast<cudaEvent_t>(event_));
  if (rc == cudaErrorNotReady) return false;
  check(rc, "waiting for the stream's point");
  return true;
}

void cast_async(const BufferView& src, const BufferView& dst, StreamRef stream) {
  auto s = static_cast<cudaStream_t>(stream.cuda_stream);
  if (src.count == 0) return;
  if (src.dtype == dst.dtype) {
    check(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDeviceToDevice, s), "copying");
    return;
  }
  if (!is_float_type(src.dtype) || !is_float_type(dst.dtype))
    throw Error(ErrorCategory::kInvalidArgument,
                "cast: only between float32, bfloat16 and float16");
  // Every pair of the three types: dispatch on the input, then the output.
  auto launch = [&](const auto* in) {
    const unsigned grid = blocks_for(src.count);
    if (dst.dtype == DType::kFloat32)
      k_cast<<<grid, 256, 0, s>>>(in, static_cast<float*>(dst.data), src.count);
    else if (dst.dtype == DType::kBFloat16)
      k_cast<<<grid, 256, 0, s>>>(in, static_cast<__nv_bfloat16*>(dst.data), src.count);
    else
      k_cast<<<grid, 256, 0, s>>>(in, static_cast<__half*>(dst.data), src.count);
  };
  if (src.dtype == DType::kFloat32)
    launch(static_cast<const float*>(src.data));
  else if (src.dtype == DType::kBFloat16)
    launch(static_cast<const __nv_bfloat16*>(src.data));
  else
    launch(static_cast<const __half*>(src.data));
  check(cudaGetLastError(), "launching a cast kernel");
}

}  // namespace rtd::gpu

// The copy-engine all-reduce's addition (collectives/nccl/ce_kernels.h).
namespace rtd::nccl {
namespace {

template <typename T>
__global__ void k_reduce_slots(T* dst, const T* src, const T* scratch, size_t slot_elems, int slots,
                               size_t n, float scale) {
  for (size_t j = blockIdx.x * size_t(blockDim.x) + threadIdx.x; j < n;
       j += size_t(gridDim.x) * blockDim.x) {
    float acc = load_f32(src, j);
    for (int s = 0; s < slots; ++s) acc += load_f32(scratch, s * slot_elems + j);
    store_f32(dst, j, acc * scale);
  }
}

// 16 bytes at a time: four float32 or eight bfloat16, summed in float32.
__device__ void add_into(float (&acc)[4], const float4& v) {
  acc[0] += v.x;
  acc[1] += v.y;
  acc[2] += v.z;
  acc[3] += v.w;
}
__device__ void load_into(float (&acc)[4], const float4& v) {
  acc[0] = v.x;
  acc[1] = v.y;
  acc[2] = v.z;
  acc[3] = v.w;
}
__device__ float4 pack(const float (&acc)[4], float scale) {
  return make_float4(acc[0] * scale, acc[1] * scale, acc[2] * scale, acc[3] * scale);
}
__device__ void add_into(float (&acc)[8], const uint4& v) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v);
  for (int k = 0; k < 4; ++k) {
    float2 f = __bfloat1622float2(h[k]);
    acc[2 * k] += f.x;
    acc[2 * k + 1] += f.y;
  }
}
__device__ void load_into(float (&acc)[8], const uint4& v) {
  for (float& a : acc) a = 0.0f;
  add_into(acc, v);
}
__device__ uint4 pack(const float (&acc)[8], float scale) {
  uint4 out;
  auto* h = reinterpret_cast<__nv_bfloat162*>(&out);
  for (int k = 0; k < 4; ++k) {
    h[k] = __floats2bfloat162_rn(acc[2 * k] * scale, acc[2 * k + 1] * scale);
  }
  return out;
}

// V: float4 (four float32) or uint4 (eight bfloat16); LANES floats per V.
template <typename V, int LANES>
__global__ void k_reduce_slots_vec(V* dst, const V* src, const V* scratch, size_t slot_vecs,
                                   int slots, size_t nvec, float scale) {
  for (size_t j = blockIdx.x * size_t(blockDim.x) + threadIdx.x; j < nvec;
       j += size_t(gridDim.x) * blockDim.x) {
    float acc[LANES];
    load_into(acc, src[j]);
    for (int s = 0; s < slots; ++s) add_into(acc, scratch[s * slot_vecs + j]);
    dst[j] = pack(acc, scale);
  }
}

unsigned grid_for(size_t items, int blocks) {
  size_t needed = (items + 255) / 256;
  size_t cap = blocks > 0 ? static_cast<size_t>(blocks) : 2048;
  size_t grid = needed < cap ? needed : cap;
  return static_cast<unsigned>(grid == 0 ? 1 : grid);
}

// The bulk 16 bytes at a time where the layout allows it, the tail one by one.
template <typename T, typename V, int LANES>
void reduce(T* dst, const T* src, const T* scratch, size_t slot_elems, int slots, size_t n,
            float scale, int blocks, cudaStream_t stream) {
  const bool aligned = reinterpret_cast<uintptr_t>(dst) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(scratch) % 16 == 0 && slot_elems % LANES == 0;
  const size_t nvec = aligned ? n / LANES : 0;
  if (nvec > 0) {
    k_reduce_slots_vec<V, LANES><<<grid_for(nvec, blocks), 256, 0, stream>>>(
        reinterpret_cast<V*>(dst), reinterpret_cast<const V*>(src),
        reinterpret_cast<const V*>(scratch), slot_elems / LANES, slots, nvec, scale);
  }
  const size_t done = nvec * LANES;
  if (n > done) {
    k_reduce_slots<<<grid_for(n - done, blocks), 256, 0, stream>>>(
        dst + done, src + done, scratch + done, slot_elems, slots, n - done, scale);
  }
}

}  // namespace

void reduce_slots_async(void* dst, const void* src, const void* scratch, std::size_t slot_elems,
                        int slots, std::size_t n, DType dtype, float scale, int blocks,
                        cudaStream_t stream) {
  if (n == 0) return;
  if (dtype == DType::kFloat16) {  // element by element (no 16-byte path for float16 yet)
    k_reduce_slots<<<grid_for(n, blocks), 256, 0, stream>>>(
        static_cast<__half*>(dst), static_cast<const __half*>(src),
        static_cast<const __half*>(scratch), slot_elems, slots, n, scale);
    return;
  }
  if (dtype == DType::kBFloat16) {
    reduce<__nv_bfloat16, uint4, 8>(
        static_cast<__nv_bfloat16*>(dst), static_cast<const __nv_bfloat16*>(src),
        static_cast<const __nv_bfloat16*>(scratch), slot_elems, slots, n, scale, blocks, stream);
  } else {
    reduce<float, float4, 4>(static_cast<float*>(dst), static_cast<const float*>(src),
                             static_cast<const float*>(scratch), slot_elems, slots, n, scale,
                             blocks, stream);
  }
}

}  // namespace rtd::nccl
