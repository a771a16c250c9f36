// Owned buffers and the few element-wise operations the reducer needs, on the
// host or a GPU: zero, and cast between float32 and bfloat16. GPU operations
// are enqueued on the given stream and never block the host.
#pragma once

#include <cstddef>
#include <vector>

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

// Host memory of the model states that are offloaded: pinned (page-locked, so
// that copies to and from a GPU run asynchronously at the link's speed) when
// `pinned`, else ordinary memory. Zeroed.
class HostBuffer {
 public:
  HostBuffer(std::size_t bytes, bool pinned);
  ~HostBuffer();
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  static void* allocate_touched(std::size_t bytes);

  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  bool pinned_ = false;
};

void zero_async(const BufferView& buf, StreamRef stream);
// dst = src converted (float32 <-> bfloat16, or a plain copy for equal dtypes).
void cast_async(const BufferView& src, const BufferView& dst, StreamRef stream);

// The GPU side, implemented in nccl/device_ops.cu (or a stub without CUDA).
namespace gpu {
void* allocate(int device, std::size_t bytes);
// GPU `device`'s free memory now (cudaMemGetInfo), in bytes.
std::size_t free_bytes(int device);
void release(void* ptr);
void zero_async(void* ptr, std::size_t bytes, StreamRef stream);
void cast_async(const BufferView& src, const BufferView& dst, StreamRef stream);
// The point the work queued on a stream has reached when it is made (an
// event), for a host-side backend (MPI) whose own thread must not touch a
// device buffer before the stream has written it: that thread polls
// reached(); the caller's thread never blocks.
class StreamPoint {
 public:
  explicit StreamPoint(StreamRef stream);
  ~StreamPoint();
  StreamPoint(const StreamPoint&) = delete;
  StreamPoint& operator=(const StreamPoint&) = delete;
  // True once the stream's work up to the point is done; throws on a CUDA error.
  bool reached();

 private:
  void* event_ = nullptr;
};
// Blocking copies between GPU `device` and host memory, for checkpoints:
// they order after the work already queued on the legacy default stream
// only, so the caller finishes the work that writes (or reads) the GPU
// buffer first. Pinned host memory makes them run at the link's speed.
void copy_to_host(const void* gpu_src, void* host_dst, std::size_t bytes, int device);
void copy_from_host(const void* host_src, void* gpu_dst, std::size_t bytes, int device);
void* allocate_pinned(std::size_t bytes);
void release_pinned(void* ptr);

// Copies between host and GPU memory on a stream of their own on `device`,
// ordered against the caller's streams by events, never by blocking the
// caller's thread. Events are numbered 0..events-1 (a unit's number, say):
//   after(s)       the copies enqueued next start once the work queued on s so far is done;
//   mark(k, s)     event k marks the work queued on s so far;
//   after_mark(k)  the copies enqueued next start once event k's work is done;
//   record(k)      event k marks the copies enqueued so far;
//   order(k, s)    the work queued on s from now on waits for event k;
//   sync(k)        blocks the calling thread (polling) until event k's copies are done;
//   before(s)      the work queued on s from now on waits for every copy enqueued so far;
//   wait()         blocks the calling thread (polling) until every copy is done.
// One thread enqueues on a CopyStream; another may order() and sync() on an
// event once it knows (by its own means) that the event was recorded. Host
// memory should be pinned for the copies to be asynchronous. Throws
// rtd::Error on a CUDA error.
class CopyStream {
 public:
  CopyStream(int device, int events);
  ~CopyStream();
  CopyStream(const CopyStream&) = delete;
  CopyStream& operator=(const CopyStream&) = delete;
  void after(StreamRef stream);
  void mark(int event, StreamRef stream);
  void after_mark(int event);
  void to_host(const void* gpu_src, void* host_dst, std::size_t bytes);
  void to_device(const void* host_src, void* gpu_dst, std::size_t bytes);
  void record(int event);
  void order(int event, StreamRef stream);
  void sync(int event);
  void before(StreamRef stream);
  void wait();
  StreamRef stream() const { return StreamRef{stream_}; }

 private:
  int device_;
  void* stream_ = nullptr;
  std::vector<void*> events_;
  void* entry_ = nullptr;  // recorded on the caller's stream by after()
  void* done_ = nullptr;   // recorded on ours by before() and wait()
};
}  // namespace gpu

}  // namespace rtd
