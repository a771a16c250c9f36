#include "device_streams.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace rtd_torch {
namespace {

const c10::impl::DeviceGuardImplInterface& cuda() {
  return *c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
}

c10::Device gpu(int device) { return c10::Device(c10::DeviceType::CUDA, device); }

}  // namespace

c10::Stream current_stream(int device) { return cuda().getStream(gpu(device)); }

c10::Stream pool_stream(int device) { return cuda().getStreamFromGlobalPool(gpu(device)); }

OnDevice::OnDevice(int device) : previous_(cuda().exchangeDevice(gpu(device))) {}

OnDevice::~OnDevice() { cuda().uncheckedSetDevice(previous_); }

CurrentStream::CurrentStream(const c10::Stream& stream)
    : previous_(cuda().exchangeStream(stream)) {}

CurrentStream::~CurrentStream() { cuda().exchangeStream(previous_); }

}  // namespace rtd_torch
