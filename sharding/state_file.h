// StateFile: the offloaded optimizer's fp32 states (master shard, first and
// second moments) of every unit in one file on a local disk (Offload::kNvme,
// docs/offload.md), with a window of a few units in host memory.
// The host AdamW asks for a unit (acquire), steps it, and gives it back
// (release: written back in the background); prefetch reads the unit it
// will ask for next while it steps this one.
//
// The file holds each unit's three arrays one after the other, each padded to
// 4 KiB, and is moved in large aligned requests (O_DIRECT where the
// filesystem has it, so that the page cache neither holds the states nor
// hides the disk's speed), several in flight on I/O threads of its own. It is
// allocated whole when opened (a full disk fails then, not mid-run) and
// unlinked at once: nothing is left behind when the process ends.
//
// Setup and checkpoints see the whole state through map(): the window is
// written back and the file mapped; the pointers hold until the next
// acquire or prefetch, which write what the mapping changed back first.
//
// acquire, prefetch and release: one thread (the host worker); map: another,
// only while that one is idle.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace rtd {

class StateFile {
 public:
  // shard: per unit, its elements. window: units held in host memory (at
  // least 2: the one being stepped and the one read ahead). Throws
  // rtd::Error(kConfig) naming dir when it cannot be written or lacks space.
  StateFile(const std::string& dir, const std::vector<std::size_t>& shard, int window,
            int io_threads);
  ~StateFile();  // finishes the writes in flight; their errors are dropped
  StateFile(const StateFile&) = delete;
  StateFile& operator=(const StateFile&) = delete;

  // Bytes of the file, and of host memory the window takes.
  static std::size_t file_bytes(const std::vector<std::size_t>& shard);
  static std::size_t window_bytes(const std::vector<std::size_t>& shard, int window);
  std::size_t file_bytes() const { return file_bytes_; }
  std::size_t window_bytes() const { return window_bytes_; }
  bool direct() const { return direct_; }  // O_DIRECT (false: through the page cache)

  struct Unit {
    float *master, *m, *v;
  };
  // Unit u's states in host memory (read in now if no prefetch did); the
  // caller owns them until release(u). Rethrows a failed read or write.
  Unit acquire(int u);
  // Starts reading unit u in, if a slot is free and u is not held already.
  void prefetch(int u);
  // Unit u changed: written back in the background.
  void release(int u);
  // Blocks until every write has landed; rethrows a failed one.
  void flush();
  // Array k (0 master, 1 first moment, 2 second moment) of unit u, in the
  // whole file mapped into memory (see above).
  float* map(int k, int u);
  // Seconds the caller of acquire() waited for reads, since the start.
  double read_wait_seconds() const { return read_wait_ns_.load() * 1e-9; }

 private:
  struct Transfer {
    int left = 0;   // requests not done
    int error = 0;  // errno of the first that failed
    bool is_write = false;
  };
  struct Request {
    Transfer* transfer;
    char* data;
    std::size_t offset, bytes;
  };
  enum class SlotState { kEmpty, kReading, kHeld, kInUse, kWriting };
  struct Slot {
    int unit = -1;
    SlotState state = SlotState::kEmpty;
    std::uint64_t used = 0;   // when last acquired or prefetched
    bool prefetched = false;  // read ahead, not yet acquired
    Transfer transfer;
  };

  char* slot_data(int k) const { return window_ + k * slot_bytes_; }
  // A slot to read into: empty, or held for an older unit (least recently
  // used); waits for a write in flight when wait is set, else -1.
  int take_slot(std::unique_lock<std::mutex>& lock, bool wait);
  void start(Slot& slot, int k, bool is_write);  // mu_ held
  // A transfer that has landed makes its slot held (false: still moving); mu_ held.
  bool settle(Slot& slot);
  void wait_done(std::unique_lock<std::mutex>& lock, Slot& slot);
  void check(const Slot& slot) const;  // throws for a failed transfer
  void unmap();                        // writes what the mapping changed to the disk first
  void io_loop();

  std::string path_;
  int fd_ = -1;
  bool direct_ = false;
  std::vector<std::size_t> offset_, region_;  // per unit: in the file; one array, padded
  std::size_t file_bytes_ = 0, slot_bytes_ = 0, window_bytes_ = 0;
  char* window_ = nullptr;
  char* mapped_ = nullptr;
  std::vector<Slot> slots_;
  std::uint64_t clock_ = 0;
  std::atomic<long long> read_wait_ns_{0};

  std::mutex mu_;
  std::condition_variable cv_;  // requests queued; transfers done
  std::deque<Request> queue_;
  bool stop_ = false;
  std::vector<std::thread> io_;  // last: joined first
};

}  // namespace rtd
