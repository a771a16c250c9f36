#include "sharding/state_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "rt_dist/error.h"
#include "sharding/checkpoint/files.h"

namespace rtd {
namespace {

constexpr std::size_t kAlign = 4096;                    // O_DIRECT's offsets, sizes and buffers
constexpr std::size_t kRequest = std::size_t(8) << 20;  // one pread or pwrite

std::size_t padded(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

std::string gib(std::size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f GiB", bytes / 1073741824.0);
  return text;
}

// A name no other engine of this host uses (the file is unlinked at once).
std::string unique_name(const std::string& dir) {
  static std::atomic<int> count{0};
  return dir + "/rtd-offload-" + std::to_string(::getpid()) + "-" + std::to_string(count++) +
         ".states";
}

}  // namespace

std::size_t StateFile::file_bytes(const std::vector<std::size_t>& shard) {
  std::size_t sum = 0;
  for (std::size_t n : shard) sum += 3 * padded(n * 4);
  return sum;
}

std::size_t StateFile::window_bytes(const std::vector<std::size_t>& shard, int window) {
  std::size_t largest = 0;
  for (std::size_t n : shard) largest = std::max(largest, 3 * padded(n * 4));
  return std::min<std::size_t>(window, shard.size()) * largest;
}

StateFile::StateFile(const std::string& dir, const std::vector<std::size_t>& shard, int window,
                     int io_threads)
    : path_(unique_name(dir)) {
  if (dir.empty())
    throw Error(
        ErrorCategory::kConfig,
        "offload nvme: no directory given (FSDPOptions::offload_dir, mlp_gpu --offload-dir)");
  for (std::size_t n : shard) {
    offset_.push_back(file_bytes_);
    region_.push_back(padded(n * 4));
    file_bytes_ += 3 * region_.back();
    slot_bytes_ = std::max(slot_bytes_, 3 * region_.back());
  }
  window = std::max(1, std::min<int>(window, static_cast<int>(shard.size())));
  window_bytes_ = window * slot_bytes_;
  // O_DIRECT first; a filesystem without it (older tmpfs) goes through the page cache.
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0600);
  direct_ = fd_ >= 0;
  if (fd_ < 0 && errno == EINVAL)
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    const int err = errno;
    throw Error(ErrorCategory::kConfig,
                "offload nvme: cannot create a file in " + dir + ": " + std::strerror(err) +
                    "; give a directory this process can write (a local NVMe disk)",
                err);
  }
  ::unlink(path_.c_str());
  if (const int err = ::posix_fallocate(fd_, 0, static_cast<off_t>(file_bytes_)); err != 0) {
    ::close(fd_);
    const std::uint64_t free = ckpt::free_bytes(dir);
    throw Error(ErrorCategory::kConfig,
                "offload nvme: the optimizer states need " + gib(file_bytes_) + " in " + dir +
                    " (free: " + gib(free) + "): " + std::strerror(err) +
                    "; free space there, give a larger disk, or shard over more ranks",
                err);
  }
  window_ = static_cast<char*>(std::aligned_alloc(kAlign, window_bytes_));
  if (!window_) {
    ::close(fd_);
    throw Error(ErrorCategory::kInternal,
                "offload nvme: out of host memory for a window of " + gib(window_bytes_));
  }
  slots_.resize(window);
  for (int t = 0; t < std::max(1, io_threads); ++t) io_.emplace_back([this] { io_loop(); });
}

StateFile::~StateFile() {
  try {
    flush();
    unmap();
  } catch (const std::exception&) {
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : io_) t.join();
  std::free(window_);
  if (fd_ >= 0) ::close(fd_);
}

void StateFile::io_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;
    const Request r = queue_.front();
    queue_.pop_front();
    lock.unlock();
    int err = 0;
    for (std::size_t done = 0; done < r.bytes;) {
      const ssize_t n =
          r.transfer->is_write
              ? ::pwrite(fd_, r.data + done, r.bytes - done, static_cast<off_t>(r.offset + done))
              : ::pread(fd_, r.data + done, r.bytes - done, static_cast<off_t>(r.offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        err = n < 0 ? errno : EIO;
        break;
      }
      done += static_cast<std::size_t>(n);
    }
    lock.lock();
    if (err && !r.transfer->error) r.transfer->error = err;
    if (--r.transfer->left == 0) cv_.notify_all();
  }
}

void StateFile::start(Slot& slot, int k, bool is_write) {
  const std::size_t bytes = 3 * region_[slot.unit], base = offset_[slot.unit];
  slot.transfer = Transfer{};
  slot.transfer.is_write = is_write;
  for (std::size_t first = 0; first < bytes; first += kRequest) {
    queue_.push_back(Request{&slot.transfer, slot_data(k) + first, base + first,
                             std::min(kRequest, bytes - first)});
    ++slot.transfer.left;
  }
  slot.state = is_write ? SlotState::kWriting : SlotState::kReading;
  cv_.notify_all();
}

void StateFile::check(const Slot& slot) const {
  if (slot.transfer.error == 0) return;
  throw Error(ErrorCategory::kBackend,
              std::string("offload nvme: ") + (slot.transfer.is_write ? "writing" : "reading") +
                  " unit " + std::to_string(slot.unit) + "'s states in " + path_ +
                  " failed: " + std::strerror(slot.transfer.error),
              slot.transfer.error);
}

bool StateFile::settle(Slot& slot) {
  const bool moving = slot.state == SlotState::kReading || slot.state == SlotState::kWriting;
  if (!moving) return true;
  if (slot.transfer.left > 0) return false;
  check(slot);
  slot.state = SlotState::kHeld;  // landed: a held unit now
  return true;
}

void StateFile::wait_done(std::unique_lock<std::mutex>& lock, Slot& slot) {
  cv_.wait(lock, [&] { return slot.transfer.left == 0; });
  settle(slot);
}

int StateFile::take_slot(std::unique_lock<std::mutex>& lock, bool wait) {
  for (;;) {
    int best = -1;
    bool moving = false;
    for (int k = 0; k < static_cast<int>(slots_.size()); ++k) {
      Slot& s = slots_[k];
      if (s.state == SlotState::kEmpty) return k;
      moving = !settle(s) || moving;
      // A unit read ahead and not yet asked for stays, unless the caller must have a slot.
      if (s.state == SlotState::kHeld && (wait || !s.prefetched) &&
          (best < 0 || s.prefetched < slots_[best].prefetched ||
           (s.prefetched == slots_[best].prefetched && s.used < slots_[best].used)))
        best = k;
    }
    if (best >= 0 || !wait) return best;
    if (!moving) throw Error(ErrorCategory::kInternal, "offload nvme: every window slot is in use");
    cv_.wait(lock);
  }
}

StateFile::Unit StateFile::acquire(int u) {
  unmap();
  std::unique_lock<std::mutex> lock(mu_);
  int k = -1;
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i)
    if (slots_[i].state != SlotState::kEmpty && slots_[i].unit == u) k = i;
  if (k < 0) {
    k = take_slot(lock, true);
    slots_[k].unit = u;
    start(slots_[k], k, false);
  }
  Slot& slot = slots_[k];
  if (slot.state == SlotState::kInUse)
    throw Error(ErrorCategory::kInternal, "offload nvme: unit acquired twice");
  const auto begin = std::chrono::steady_clock::now();
  wait_done(lock, slot);
  read_wait_ns_ +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - begin)
          .count();
  slot.state = SlotState::kInUse;
  slot.prefetched = false;
  slot.used = ++clock_;
  char* base = slot_data(k);
  const std::size_t r = region_[u];
  return Unit{reinterpret_cast<float*>(base), reinterpret_cast<float*>(base + r),
              reinterpret_cast<float*>(base + 2 * r)};
}

void StateFile::prefetch(int u) {
  if (u < 0 || u >= static_cast<int>(offset_.size())) return;
  unmap();
  std::unique_lock<std::mutex> lock(mu_);
  for (const Slot& s : slots_)
    if (s.state != SlotState::kEmpty && s.unit == u) return;
  const int k = take_slot(lock, false);
  if (k < 0) return;
  slots_[k].unit = u;
  slots_[k].prefetched = true;
  slots_[k].used = ++clock_;
  start(slots_[k], k, false);
}

void StateFile::release(int u) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int k = 0; k < static_cast<int>(slots_.size()); ++k) {
    if (slots_[k].state == SlotState::kInUse && slots_[k].unit == u)
      return start(slots_[k], k, true);
  }
  throw Error(ErrorCategory::kInternal, "offload nvme: release of a unit not acquired");
}

void StateFile::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  for (Slot& s : slots_)
    if (s.state == SlotState::kReading || s.state == SlotState::kWriting) wait_done(lock, s);
}

float* StateFile::map(int k, int u) {
  if (!mapped_) {
    flush();
    void* p = ::mmap(nullptr, file_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      throw Error(ErrorCategory::kBackend,
                  "offload nvme: mapping " + path_ + " failed: " + std::strerror(err), err);
    }
    mapped_ = static_cast<char*>(p);
    // What the mapping writes makes the window's copies stale.
    std::lock_guard<std::mutex> lock(mu_);
    for (Slot& s : slots_) s = Slot{};
  }
  return reinterpret_cast<float*>(mapped_ + offset_[u] + k * region_[u]);
}

void StateFile::unmap() {
  if (!mapped_) return;
  // On the disk before the next direct read (which bypasses the page cache).
  const int failed = ::msync(mapped_, file_bytes_, MS_SYNC) != 0 ? errno : 0;
  ::munmap(mapped_, file_bytes_);
  mapped_ = nullptr;
  if (failed)
    throw Error(
        ErrorCategory::kBackend,
        "offload nvme: writing the mapped states to " + path_ + " failed: " + std::strerror(failed),
        failed);
}

}  // namespace rtd
