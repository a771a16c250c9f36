// RecycledBlocks: an allocator for std::allocate_shared that keeps, per
// thread, up to kKept freed blocks of one size and hands them out again. The
// data path makes a Work per call and the caller drops it soon after: each
// thread's blocks go around a short list of its own, with none of the
// general allocator's bookkeeping (which, run on caches NCCL's call has just
// emptied, costs a small call about as much as the rest of our layer's
// bookkeeping). A block freed on another thread goes to that thread's list,
// or back to the general allocator once the list is full.
#pragma once

#include <cstddef>
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

template <std::size_t Size, std::size_t Align>
class BlockShelf {
 public:
  static constexpr int kKept = 32;

  // A kept block, or nullptr.
  static void* take() {
    Shelf& s = shelf();
    return s.count > 0 ? s.blocks[--s.count] : nullptr;
  }
  // Keeps block; false (keeping nothing) when the shelf is full or its
  // thread is ending (a Work dropped by another thread-local's destructor).
  static bool keep(void* block) {
    Shelf& s = shelf();
    if (s.count == kKept || s.closed) return false;
    s.blocks[s.count++] = block;
    return true;
  }

 private:
  struct Shelf {
    void* blocks[kKept];
    int count = 0;
    bool closed = false;
    ~Shelf() {  // the thread ends: its blocks go back, and no more are kept
      while (count > 0) delete_block<Align>(blocks[--count]);
      closed = true;
    }
  };
  static Shelf& shelf() {
    thread_local Shelf s;
    return s;
  }
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
    return static_cast<T*>(new_block<alignof(T)>(n * sizeof(T)));
  }
  void deallocate(T* block, std::size_t n) noexcept {
    if (n == 1 && Shelf::keep(block)) return;
    delete_block<alignof(T)>(block);
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
  using Shelf = BlockShelf<sizeof(T), alignof(T)>;
};

}  // namespace rtd::nccl
