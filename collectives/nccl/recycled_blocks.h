// RecycledBlocks: an allocator for std::allocate_shared that keeps, per
// thread, up to kKept freed blocks of one size and hands them out again. The
// data path makes a Work per call and the caller drops it soon after: each
// thread's blocks go around a short list of its own, with none of the
// general allocator's bookkeeping (which, run on caches NCCL's call has just
// emptied, costs a small call about as much as the rest of our layer's
// bookkeeping). A thread finds its list by its thread pointer (a register),
// not as a thread-local: in a shared library every thread-local lookup is a
// call to __tls_get_addr, which reads several more cache lines. A block freed
// on another thread goes to that thread's list, or back to the general
// allocator once the list is full, when two threads would share a list, or
// as the thread ends.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>

namespace rtd::nccl {

// The general allocator's calls, for blocks of Align.
template <std::size_t Align>
void* new_block(std::size_t bytes) {
  if constexpr (Align <= __STDCPP_DEFAULT_NEW_ALIGNMENT__) return ::operator new(bytes);
  return ::operator new(bytes, std::align_val_t(Align));
}
template <std::size_t Align>
void delete_block(void* block) noexcept {
  if constexpr (Align <= __STDCPP_DEFAULT_NEW_ALIGNMENT__) {
    ::operator delete(block);
  } else {
    ::operator delete(block, std::align_val_t(Align));
  }
}

// The calling thread, as its thread pointer: unique among live threads, read
// from a register.
inline std::uintptr_t this_thread_key() {
#if defined(__x86_64__) || defined(__aarch64__)
  return reinterpret_cast<std::uintptr_t>(__builtin_thread_pointer());
#else
  return static_cast<std::uintptr_t>(pthread_self());
#endif
}

template <std::size_t Size, std::size_t Align>
class BlockShelf {
 public:
  static constexpr int kKept = 6;  // a thread's list is one cache line
  static constexpr std::size_t kLists = 64;

  // A kept block, or nullptr.
  static void* take() {
    const std::uintptr_t me = this_thread_key();
    List& l = list_of(me);
    if (l.owner.load(std::memory_order_relaxed) != me || l.count == 0) return nullptr;
    return l.blocks[--l.count];
  }
  // Keeps block; false (keeping nothing) when the thread's list is full,
  // another thread's, or the thread is ending (a Work dropped by another
  // thread-local's destructor).
  static bool keep(void* block) {
    const std::uintptr_t me = this_thread_key();
    List& l = list_of(me);
    if (l.owner.load(std::memory_order_relaxed) != me && !claim(l, me)) return false;
    if (l.count == kKept) return false;
    l.blocks[l.count++] = block;
    return true;
  }

 private:
  // Only its owner reads or writes count and blocks; a list changes owner
  // only free (owner 0, stored with release after its blocks went back).
  struct alignas(64) List {
    std::atomic<std::uintptr_t> owner{0};  // the thread's key, or 0: free
    int count = 0;
    void* blocks[kKept] = {};
  };
  static_assert(sizeof(List) == 64, "a thread's list is one cache line");

  static List& list_of(std::uintptr_t key) {
    return lists_[(key * 0x9E3779B97F4A7C15ull) >> 58];  // the top 6 bits: kLists lists
  }
  // The thread's first block to keep: takes its list if free, and gives it
  // back (its blocks to the general allocator) as the thread ends.
  [[gnu::noinline]] static bool claim(List& l, std::uintptr_t me) {
    struct Release {
      List* list = nullptr;
      ~Release() {
        ending() = true;
        if (list == nullptr) return;
        while (list->count > 0) delete_block<Align>(list->blocks[--list->count]);
        list->owner.store(0, std::memory_order_release);
      }
    };
    thread_local Release release;
    if (ending() || release.list != nullptr) return false;
    std::uintptr_t free_list = 0;
    if (!l.owner.compare_exchange_strong(free_list, me, std::memory_order_acquire)) return false;
    release.list = &l;
    return true;
  }
  // Set as the thread's list goes back; a plain flag, readable to the end.
  static bool& ending() {
    thread_local bool flag = false;
    return flag;
  }

  static_assert(kLists == 64, "list_of keeps the top 6 bits of the hash");
  // Hidden: each module its own lists, reached without the GOT.
  alignas(64) inline static List lists_[kLists] __attribute__((visibility("hidden")));
};

template <typename T>
class RecycledBlocks {
 public:
  using value_type = T;

  RecycledBlocks() = default;
  template <typename U>
  RecycledBlocks(const RecycledBlocks<U>&) noexcept {}

  T* allocate(std::size_t n) {
    if (n == 1) {
      if (void* block = Shelf::take()) return static_cast<T*>(block);
    }
    return static_cast<T*>(new_block<kAlign>(n * sizeof(T)));
  }
  void deallocate(T* block, std::size_t n) noexcept {
    if (n == 1 && Shelf::keep(block)) return;
    delete_block<kAlign>(block);
  }

  template <typename U>
  bool operator==(const RecycledBlocks<U>&) const noexcept {
    return true;
  }
  template <typename U>
  bool operator!=(const RecycledBlocks<U>&) const noexcept {
    return false;
  }

 private:
  // Blocks start on a cache line: a block of 128 bytes or less is then two
  // lines, not three.
  static constexpr std::size_t kAlign = alignof(T) > 64 ? alignof(T) : 64;
  using Shelf = BlockShelf<sizeof(T), kAlign>;
};

}  // namespace rtd::nccl
