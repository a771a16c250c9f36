// Built without CUDA: GPU buffers cannot exist, so every GPU operation says so.
#include "collectives/device_memory.h"
#include "rt_dist/error.h"

namespace rtd::gpu {
namespace {
[[noreturn]] void no_gpu() {
  throw Error(ErrorCategory::kConfig,
              "librt_dist was built without CUDA; GPU buffers are not supported");
}
}  // namespace
void* allocate(int, std::size_t) { no_gpu(); }
void release(void*) {}
std::size_t free_bytes(int) { no_gpu(); }
void zero_async(void*, std::size_t, StreamRef) { no_gpu(); }
void cast_async(const BufferView&, const BufferView&, StreamRef) { no_gpu(); }
StreamPoint::StreamPoint(StreamRef) { no_gpu(); }
StreamPoint::~StreamPoint() = default;
bool StreamPoint::reached() { no_gpu(); }
void copy_to_host(const void*, void*, std::size_t, int) { no_gpu(); }
void copy_from_host(const void*, void*, std::size_t, int) { no_gpu(); }
void* allocate_pinned(std::size_t) { no_gpu(); }
void release_pinned(void*) {}
CopyStream::CopyStream(int, int) { no_gpu(); }
CopyStream::~CopyStream() = default;
void CopyStream::after(StreamRef) { no_gpu(); }
void CopyStream::mark(int, StreamRef) { no_gpu(); }
void CopyStream::after_mark(int) { no_gpu(); }
void CopyStream::to_host(const void*, void*, std::size_t) { no_gpu(); }
void CopyStream::to_device(const void*, void*, std::size_t) { no_gpu(); }
void CopyStream::record(int) { no_gpu(); }
void CopyStream::order(int, StreamRef) { no_gpu(); }
void CopyStream::sync(int) { no_gpu(); }
void CopyStream::before(StreamRef) { no_gpu(); }
void CopyStream::wait() { no_gpu(); }
}  // namespace rtd::gpu
