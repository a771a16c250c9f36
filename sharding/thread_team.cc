#include "sharding/thread_team.h"

#include <algorithm>

namespace rtd::shard::cpu {

ThreadTeam::ThreadTeam(int helpers) {
  for (int t = 0; t < helpers; ++t) helpers_.emplace_back([this] { helper_loop(); });
}

ThreadTeam::~ThreadTeam() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (auto& t : helpers_) t.join();
}

void ThreadTeam::take_chunks() {
  for (;;) {
    const std::size_t begin = next_.fetch_add(1) * chunk_;
    if (begin >= n_) return;
    (*body_)(begin, std::min(n_, begin + chunk_));
  }
}

void ThreadTeam::helper_loop() {
  std::uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    start_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    lock.unlock();
    take_chunks();
    lock.lock();
    if (--busy_ == 0) finished_.notify_one();
  }
}

void ThreadTeam::run(std::size_t n, std::size_t chunk, const Body& body) {
  if (n == 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    body_ = &body;
    n_ = n;
    chunk_ = std::max<std::size_t>(1, chunk);
    next_ = 0;
    busy_ = static_cast<int>(helpers_.size());
    ++generation_;
  }
  start_.notify_all();
  take_chunks();
  std::unique_lock<std::mutex> lock(mu_);
  finished_.wait(lock, [&] { return busy_ == 0; });
}

}  // namespace rtd::shard::cpu
