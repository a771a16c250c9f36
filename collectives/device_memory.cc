// DeviceBuffer and the host halves of zero/cast; GPU halves in gpu::.
#include "collectives/device_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "rt_dist/error.h"

namespace rtd {

DeviceBuffer::DeviceBuffer(DeviceType device, int device_index, std::size_t bytes)
    : device_(device), bytes_(bytes) {
  if (device == DeviceType::kCuda) {
    data_ = gpu::allocate(device_index, bytes);
  } else {
    data_ = std::calloc(bytes == 0 ? 1 : bytes, 1);
    if (data_ == nullptr) throw Error(ErrorCategory::kInternal, "out of host memory");
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ == nullptr) return;
  if (device_ == DeviceType::kCuda)
    gpu::release(data_);
  else
    std::free(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_(other.device_), data_(std::exchange(other.data_, nullptr)), bytes_(other.bytes_) {}

HostBuffer::HostBuffer(std::size_t bytes, bool pinned) : bytes_(bytes), pinned_(pinned) {
  if (pinned) {
    data_ = gpu::allocate_pinned(bytes);
    std::memset(data_, 0, bytes);
  } else {
    data_ = allocate_touched(bytes);
  }
}

// Host states of many GiB: 2 MiB-aligned, so that transparent huge pages can
// back them, and written once now by a thread per core, so that the first
// training step does not fault in every page on its own (a 2B-parameter
// model's first offloaded step took 7 s longer).
void* HostBuffer::allocate_touched(std::size_t bytes) {
  constexpr std::size_t kHuge = std::size_t(2) << 20;
  if (bytes < 32 * kHuge) {
    void* p = std::calloc(bytes == 0 ? 1 : bytes, 1);
    if (p == nullptr)
      throw Error(ErrorCategory::kInternal,
                  "out of host memory (" + std::to_string(bytes) + " bytes asked)");
    return p;
  }
  const std::size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, rounded);
  if (p == nullptr)
    throw Error(ErrorCategory::kInternal,
                "out of host memory (" + std::to_string(bytes) + " bytes asked)");
  madvise(p, rounded, MADV_HUGEPAGE);  // a hint: without it, 4 KiB pages
  const std::size_t threads = std::max<std::size_t>(
      1, std::min<std::size_t>(std::thread::hardware_concurrency(), rounded / (16 * kHuge)));
  const std::size_t chunk = (rounded / threads + kHuge - 1) / kHuge * kHuge;
  std::vector<std::thread> helpers;
  for (std::size_t t = 0; t < threads; ++t) {
    const std::size_t first = t * chunk;
    if (first >= rounded) break;
    helpers.emplace_back(
        [=] { std::memset(static_cast<char*>(p) + first, 0, std::min(chunk, rounded - first)); });
  }
  for (auto& h : helpers) h.join();
  return p;
}

HostBuffer::~HostBuffer() {
  if (pinned_)
    gpu::release_pinned(data_);
  else
    std::free(data_);
}

void zero_async(const BufferView& buf, StreamRef stream) {
  if (buf.device == DeviceType::kCuda) return gpu::zero_async(buf.data, buf.bytes(), stream);
  std::memset(buf.data, 0, buf.bytes());
}

void cast_async(const BufferView& src, const BufferView& dst, StreamRef stream) {
  if (src.count != dst.count) throw Error(ErrorCategory::kInternal, "cast: counts differ");
  if (src.device == DeviceType::kCuda) return gpu::cast_async(src, dst, stream);
  if (src.dtype == dst.dtype) {
    std::memmove(dst.data, src.data, src.bytes());
    return;
  }
  if (!is_float_type(src.dtype) || !is_float_type(dst.dtype))
    throw Error(ErrorCategory::kInvalidArgument,
                "cast: only between float32, bfloat16 and float16");
  auto widen = [&](std::size_t i) {
    const void* p = src.data;
    if (src.dtype == DType::kFloat32) return static_cast<const float*>(p)[i];
    const std::uint16_t bits = static_cast<const std::uint16_t*>(p)[i];
    return src.dtype == DType::kBFloat16 ? bf16_to_float(bits) : f16_to_float(bits);
  };
  for (std::size_t i = 0; i < src.count; ++i) {
    const float v = widen(i);
    if (dst.dtype == DType::kFloat32)
      static_cast<float*>(dst.data)[i] = v;
    else
      static_cast<std::uint16_t*>(dst.data)[i] =
          dst.dtype == DType::kBFloat16 ? float_to_bf16(v) : float_to_f16(v);
  }
}

}  // namespace rtd
