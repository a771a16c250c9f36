// NcclWork: completion by event query, failure by async error, timeout by abort.
#include "collectives/nccl/nccl_work.h"

#include <atomic>
#include <new>
#include <thread>
#include <vector>

#include "collectives/nccl/nccl_check.h"

namespace rtd::nccl {
namespace {

// Blocks of one size, kept for reuse (up to kKept of them). Never destroyed:
// a Work may be freed by any thread at any time, static destructors included.
class BlockPool {
 public:
  explicit BlockPool(std::size_t bytes) : bytes_(bytes) { free_.reserve(kKept); }
  void* take() {
    lock();
    void* p = nullptr;
    if (!free_.empty()) {
      p = free_.back();
      free_.pop_back();
    }
    unlock();
    return p ? p : ::operator new(bytes_);
  }
  void give(void* p) {
    lock();
    const bool kept = free_.size() < kKept;
    if (kept) free_.push_back(p);
    unlock();
    if (!kept) ::operator delete(p);
  }

 private:
  static constexpr std::size_t kKept = 4096;
  // Held for a push or a pop: spinning beats a mutex's system calls.
  void lock() {
    while (busy_.test_and_set(std::memory_order_acquire)) std::this_thread::yield();
  }
  void unlock() { busy_.clear(std::memory_order_release); }
  const std::size_t bytes_;
  std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
  std::vector<void*> free_;
};

template <typename T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <typename U>
  PoolAllocator(const PoolAllocator<U>&) {}  // NOLINT: rebinding, as allocators do
  static BlockPool& pool() {
    static BlockPool* pool = new BlockPool(sizeof(T));  // never freed: see BlockPool
    return *pool;
  }
  T* allocate(std::size_t n) {
    if (n != 1) return std::allocator<T>().allocate(n);
    return static_cast<T*>(pool().take());
  }
  void deallocate(T* p, std::size_t n) {
    if (n != 1) return std::allocator<T>().deallocate(p, n);
    pool().give(p);
  }
  template <typename U>
  bool operator==(const PoolAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const PoolAllocator<U>&) const {
    return false;
  }
};

}  // namespace

std::shared_ptr<NcclWork> make_nccl_work(std::shared_ptr<CommState> state, EndTicket end,
                                         CallName name, cudaStream_t ran_on) {
  return std::allocate_shared<NcclWork>(PoolAllocator<NcclWork>(), std::move(state), end,
                                        std::move(name), ran_on);
}

NcclWork::NcclWork(std::shared_ptr<CommState> state, EndTicket end, CallName name,
                   cudaStream_t ran_on)
    : state_(std::move(state)), end_(end), name_(std::move(name)), ran_on_(ran_on) {}

bool NcclWork::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (complete_ || error_) return true;
  // An abort fails every operation not yet seen complete: after it, an end
  // event may fire over data a released wait or a cut-off kernel never wrote.
  if (auto failure = state_->failure()) {
    error_ =
        Error(failure->category(), name_.text() + ": " + failure->what(), failure->backend_code());
    return true;
  }
  // Retired (before or during the query: the slot may then be another
  // operation's): the in-flight list saw it complete.
  if (end_.retired()) {
    complete_ = true;
    return true;
  }
  cudaError_t rc = state_->cuda().event_query(end_.slot->event);
  if (rc == cudaSuccess || end_.retired()) {
    complete_ = true;
    return true;
  }
  if (rc != cudaErrorNotReady) {
    error_ = Error(ErrorCategory::kBackend,
                   name_.text() + ": CUDA error " + state_->cuda().error_string(rc), rc);
    return true;
  }
  return false;
}

void NcclWork::wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  // Spin (yielding) for the first millisecond: short operations finish in
  // microseconds and a sleep costs tens of them.
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
  auto pause = std::chrono::microseconds(50);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string why = name_.text() + " did not complete within " +
                        std::to_string(timeout.count()) + " ms on rank " +
                        std::to_string(state_->rank()) +
                        "; a peer may have failed or not called it";
      if (std::string diagnosis = state_->diagnose(name_.recorded); !diagnosis.empty())
        why += "; " + diagnosis;
      state_->abort(why);
      std::lock_guard<std::mutex> lock(mu_);
      error_ = Error(ErrorCategory::kTimeout, why + " (communicator aborted)");
      throw *error_;
    }
    if (std::chrono::steady_clock::now() < spin_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(500));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) throw *error_;
}

void NcclWork::wait(StreamRef stream) {
  if (ran_on_ != nullptr && stream.cuda_stream == ran_on_) return;  // already after it
  if (end_.retired()) return;                                       // complete
  // Should the slot go on to a later operation meanwhile, the stream waits
  // for that one too: later than needed, never earlier.
  RTD_CUDA_CHECK(state_->cuda(),
                 state_->cuda().stream_wait_event(static_cast<cudaStream_t>(stream.cuda_stream),
                                                  end_.slot->event),
                 name_.text() + ": ordering a stream after it");
}

std::optional<Error> NcclWork::error() const {
  done();
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

}  // namespace rtd::nccl
