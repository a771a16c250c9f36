// Owned buffers and the few element-wise operations the reducer needs, on the
// host or a GPU: zero, and cast between float32 and bfloat16. GPU operations
// are enqueued on the given stream and never block the host.
#pragma once

#include <cstddef>

#include "rt_dist/types.h"
#include "rt_dist/work.h"

namespace rtd {

class DeviceBuffer {
 public:
  DeviceBuffer(DeviceType device, int device_index, std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  DeviceType device() const { return device_; }

 private:
  DeviceType device_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

void zero_async(const BufferView& buf, StreamRef stream);
// dst = src converted (float32 <-> bfloat16, or a plain copy for equal dtypes).
void cast_async(const BufferView& src, const BufferView& dst, StreamRef stream);

// The GPU side, implemented in nccl/device_ops.cu (or a stub without CUDA).
namespace gpu {
void* allocate(int device, std::size_t bytes);
void release(void* ptr);
void zero_async(void* ptr, std::size_t bytes, StreamRef stream);
void cast_async(const BufferView& src, const BufferView& dst, StreamRef stream);
// Blocking copies between GPU `device` and host memory, for checkpoints:
// they order after the work already queued on the legacy default stream
// only, so the caller finishes the work that writes (or reads) the GPU
// buffer first. Pinned host memory makes them run at the link's speed.
void copy_to_host(const void* gpu_src, void* host_dst, std::size_t bytes, int device);
void copy_from_host(const void* host_src, void* gpu_dst, std::size_t bytes, int device);
void* allocate_pinned(std::size_t bytes);
void release_pinned(void* ptr);

// Device-to-host copies on a stream of their own on `device`, ordered against
// a caller's stream by events: after(s) makes the copies enqueued next start
// once the work queued on s so far is done; before(s) makes the work queued
// on s from now on wait for them; wait() blocks the calling thread (not the
// caller's stream) until they are done. Throws rtd::Error on a CUDA error.
class HostCopies {
 public:
  explicit HostCopies(int device);
  ~HostCopies();
  HostCopies(const HostCopies&) = delete;
  HostCopies& operator=(const HostCopies&) = delete;
  void after(StreamRef stream);
  void copy(const void* gpu_src, void* host_dst, std::size_t bytes);
  void before(StreamRef stream);
  void wait();

 private:
  int device_;
  void* stream_ = nullptr;
  void* ready_ = nullptr;  // recorded on the caller's stream
  void* done_ = nullptr;   // recorded on ours after the copies
};
}  // namespace gpu

}  // namespace rtd
