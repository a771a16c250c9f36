// Stand-in for gloo/common/memory.h, which Debian's libgloo-dev (2022-05-18)
// leaves out although gloo/transport/tcp/{pair,unbound_buffer}.h include it.
// Only pair_abort.cc reads those headers: it takes a strong reference to an
// unbound buffer a pair still points at (NonOwningPtr from WeakNonOwningPtr),
// so these three hold what Gloo's do, one smart pointer each, laid out alike.
// Found after the system headers (-idirafter): where gloo ships its own, that
// one wins.
#pragma once

#include <memory>

namespace gloo {

template <typename T>
class WeakNonOwningPtr;
template <typename T>
class ShareableNonOwningPtr;

// A strong reference, taken only while the object is alive.
template <typename T>
class NonOwningPtr final {
 public:
  NonOwningPtr() = default;
  explicit NonOwningPtr(const WeakNonOwningPtr<T>& weak) : ptr_(weak.ptr_.lock()) {}
  T* operator->() const noexcept { return ptr_.get(); }
  explicit operator bool() const noexcept { return static_cast<bool>(ptr_); }

 private:
  std::shared_ptr<T> ptr_;
};

// What a pair keeps of a buffer it will read into or write from.
template <typename T>
class WeakNonOwningPtr final {
 public:
  WeakNonOwningPtr() = default;
  explicit WeakNonOwningPtr(const ShareableNonOwningPtr<T>& root) : ptr_(root.ptr_) {}

 private:
  std::weak_ptr<T> ptr_;
  friend class NonOwningPtr<T>;
};

// The buffer's own root reference (never made or destroyed here).
template <typename T>
class ShareableNonOwningPtr final {
 public:
  ShareableNonOwningPtr(const ShareableNonOwningPtr&) = delete;
  ShareableNonOwningPtr& operator=(const ShareableNonOwningPtr&) = delete;

 private:
  std::shared_ptr<T> ptr_;
  friend class WeakNonOwningPtr<T>;
};

}  // namespace gloo
