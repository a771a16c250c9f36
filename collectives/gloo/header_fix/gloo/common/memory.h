// Stand-in for gloo/common/memory.h, which Debian's libgloo-dev (2022-05-18)
// leaves out although gloo/transport/tcp/pair.h includes it. Only
// pair_abort.cc reads that header, and only to call one of Pair's
// out-of-line functions, so these types are named, never used. Found after
// the system headers (-idirafter): where gloo ships its own, that one wins.
#pragma once

#include <memory>

namespace gloo {

template <typename T>
class NonOwningPtr {
  std::shared_ptr<T> ptr_;
};

template <typename T>
class WeakNonOwningPtr {
  std::weak_ptr<T> ptr_;
};

}  // namespace gloo
