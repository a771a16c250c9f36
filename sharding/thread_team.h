// ThreadTeam: helper threads kept for a job that the caller splits into
// chunks and runs again and again (the host AdamW, unit after unit). Each
// chunk goes to whichever thread is free, so that a core that runs slow for
// a while (another process on it, a busy neighbour of a virtual machine)
// delays the job by its chunk, not by a whole equal part; and no thread is
// started per job.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rtd::shard::cpu {

class ThreadTeam {
 public:
  explicit ThreadTeam(int helpers);  // helpers >= 0 threads besides the caller
  ~ThreadTeam();
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;
  int size() const { return static_cast<int>(helpers_.size()) + 1; }  // with the caller

  using Body = std::function<void(std::size_t begin, std::size_t end)>;
  // body over [0, n) in chunks of `chunk` elements (the last shorter), on the
  // helpers and the calling thread; returns when every chunk has run. body
  // must not throw. One run at a time.
  void run(std::size_t n, std::size_t chunk, const Body& body);

 private:
  void take_chunks();
  void helper_loop();

  std::mutex mu_;
  std::condition_variable start_, finished_;
  std::uint64_t generation_ = 0;  // one per run
  int busy_ = 0;                  // helpers still in this run
  bool stop_ = false;
  const Body* body_ = nullptr;
  std::size_t n_ = 0, chunk_ = 1;
  std::atomic<std::size_t> next_{0};  // the next chunk to take
  std::vector<std::thread> helpers_;
};

}  // namespace rtd::shard::cpu
