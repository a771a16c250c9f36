// GPU halves of DeviceBuffer, zero and cast (collectives/device_memory.h).
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <string>

#include "collectives/device_memory.h"
#include "collectives/nccl/ce_kernels.h"
#include "rt_dist/error.h"

namespace rtd::gpu {
namespace {

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    throw Error(ErrorCategory::kBackend,
                std::string(what) + ": CUDA error " + cudaGetErrorString(rc), rc);
  }
}

__global__ void f32_to_bf16(const float* in, __nv_bfloat16* out, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    out[i] = __float2bfloat16_rn(in[i]);
  }
}

__global__ void bf16_to_f32(const __nv_bfloat16* in, float* out, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    out[i] = __bfloat162float(in[i]);
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
  check(rc, "allocating gradient buckets");
  return p;
}

void release(void* ptr) { cudaFree(ptr); }

void zero_async(void* ptr, std::size_t bytes, StreamRef stream) {
  check(cudaMemsetAsync(ptr, 0, bytes, static_cast<cudaStream_t>(stream.cuda_stream)), "zeroing");
}

void cast_async(const BufferView& src, const BufferView& dst, StreamRef stream) {
  auto s = static_cast<cudaStream_t>(stream.cuda_stream);
  if (src.count == 0) return;
  if (src.dtype == dst.dtype) {
    check(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDeviceToDevice, s), "copying");
    return;
  }
  if (src.dtype == DType::kFloat32 && dst.dtype == DType::kBFloat16) {
    f32_to_bf16<<<blocks_for(src.count), 256, 0, s>>>(
        static_cast<const float*>(src.data), static_cast<__nv_bfloat16*>(dst.data), src.count);
  } else if (src.dtype == DType::kBFloat16 && dst.dtype == DType::kFloat32) {
    bf16_to_f32<<<blocks_for(src.count), 256, 0, s>>>(static_cast<const __nv_bfloat16*>(src.data),
                                                      static_cast<float*>(dst.data), src.count);
  } else {
    throw Error(ErrorCategory::kInvalidArgument, "cast: only float32 <-> bfloat16");
  }
  check(cudaGetLastError(), "launching a cast kernel");
}

}  // namespace rtd::gpu

// The copy-engine all-reduce's addition (collectives/nccl/ce_kernels.h).
namespace rtd::nccl {
namespace {

template <typename T>
__device__ float load_f32(const T* p, size_t i);
template <>
__device__ float load_f32<float>(const float* p, size_t i) {
  return p[i];
}
template <>
__device__ float load_f32<__nv_bfloat16>(const __nv_bfloat16* p, size_t i) {
  return __bfloat162float(p[i]);
}
__device__ void store_f32(float* p, size_t i, float v) { p[i] = v; }
__device__ void store_f32(__nv_bfloat16* p, size_t i, float v) { p[i] = __float2bfloat16_rn(v); }

template <typename T>
__global__ void k_reduce_slots(T* dst, const T* scratch, size_t slot_elems, int slots, size_t n,
                               float scale) {
  for (size_t j = blockIdx.x * size_t(blockDim.x) + threadIdx.x; j < n;
       j += size_t(gridDim.x) * blockDim.x) {
    float acc = load_f32(dst, j);
    for (int s = 0; s < slots; ++s) acc += load_f32(scratch, s * slot_elems + j);
    store_f32(dst, j, acc * scale);
  }
}

}  // namespace

void reduce_slots_async(void* dst, const void* scratch, std::size_t slot_elems, int slots,
                        std::size_t n, DType dtype, float scale, int blocks, cudaStream_t stream) {
  if (n == 0) return;
  size_t needed = (n + 255) / 256;
  size_t cap = blocks > 0 ? static_cast<size_t>(blocks) : 2048;
  unsigned grid = static_cast<unsigned>(needed < cap ? needed : cap);
  if (dtype == DType::kBFloat16) {
    k_reduce_slots<<<grid, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(dst),
                                             static_cast<const __nv_bfloat16*>(scratch), slot_elems,
                                             slots, n, scale);
  } else {
    k_reduce_slots<<<grid, 256, 0, stream>>>(
        static_cast<float*>(dst), static_cast<const float*>(scratch), slot_elems, slots, n, scale);
  }
}

}  // namespace rtd::nccl
