// HandoffRing: hands items from one producing thread to consumers that take
// turns (under a lock of their own), with neither a lock nor a
// read-modify-write on the producer's side: a push writes a slot and
// publishes it with one release store. The producer may also consume (under
// the consumers' lock); it never pushes while it does.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace rtd::nccl {

template <typename T, std::size_t N>
class HandoffRing {
  static_assert(N > 0 && (N & (N - 1)) == 0, "the capacity is a power of two");

 public:
  // Producer only. False, with nothing written, when the ring is full.
  bool push(T&& item) {
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    if (tail - head_seen_ >= N) {
      head_seen_ = head_.load(std::memory_order_acquire);  // the consumers' progress
      if (tail - head_seen_ >= N) return false;
    }
    slots_[tail & (N - 1)] = std::move(item);
    tail_.store(tail + 1, std::memory_order_release);
    return true;
  }

  // A consumer (one at a time): fn(T&&) on every item pushed so far, oldest
  // first. The slots are handed back to the producer once fn saw them all.
  template <typename Fn>
  void drain(Fn&& fn) {
    const std::uint64_t tail = tail_.load(std::memory_order_acquire);
    std::uint64_t head = head_.load(std::memory_order_relaxed);
    if (head == tail) return;
    for (; head != tail; ++head) fn(std::move(slots_[head & (N - 1)]));
    head_.store(tail, std::memory_order_release);
  }

  static constexpr std::size_t capacity() { return N; }

 private:
  std::array<T, N> slots_{};
  alignas(64) std::atomic<std::uint64_t> tail_{0};  // written by the producer
  std::uint64_t head_seen_ = 0;                     // the producer's copy of head_
  alignas(64) std::atomic<std::uint64_t> head_{0};  // written by consumers
};

}  // namespace rtd::nccl
