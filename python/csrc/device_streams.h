// The CUDA streams the backend works with, reached through c10's device-
// generic interfaces (no CUDA headers, no libc10_cuda): the extension builds
// against any torch, with or without CUDA, and asks at run time.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

namespace rtd_torch {

// The caller's current stream on GPU `device` (native_handle(): its
// cudaStream_t).
c10::Stream current_stream(int device);

// A stream of torch's pool on `device` (the same for the life of the
// caller): where a GPU operation's finishing steps run and where its
// future's events are recorded.
c10::Stream pool_stream(int device);

// Makes GPU `device` the calling thread's current one while alive: what
// CUDA does on "the current device" (its legacy default stream, which is
// torch's current stream unless a script set another; events made without
// a device) is then the group's GPU, whatever the script set current.
class OnDevice {
 public:
  explicit OnDevice(int device);
  ~OnDevice();
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  c10::Device previous_;
};

// Makes `stream` the current one on its device while alive.
class CurrentStream {
 public:
  explicit CurrentStream(const c10::Stream& stream);
  ~CurrentStream();
  CurrentStream(const CurrentStream&) = delete;
  CurrentStream& operator=(const CurrentStream&) = delete;

 private:
  c10::Stream previous_;
};

}  // namespace rtd_torch
