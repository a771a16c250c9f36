// The loader: shard files, the distributed sampler, and the prefetch thread.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>

#include "collectives/device_memory.h"
#include "data/shard_file.h"
#include "rt_dist/data.h"
#include "rt_dist/error.h"

namespace rtd::data {
namespace {

std::uint64_t splitmix(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

struct Loader::Impl {
  LoaderOptions o;
  std::vector<std::unique_ptr<ShardFile>> files;
  std::vector<std::uint64_t> starts;  // each file's first global record
  std::uint64_t total = 0;
  std::uint64_t global_batch = 0;
  std::uint64_t steps = 0;
  std::size_t batch_bytes = 0;
  // The epoch whose order is in `order`.
  std::uint64_t order_epoch = ~0ull;
  std::vector<std::uint64_t> order;

  // Batch buffers (pinned host memory when batches go to a GPU): prefetch of
  // them ready or being filled, one handed out (`current`).
  std::vector<unsigned char*> slots;
  std::deque<int> free_slots, ready;
  int current = -1;
  // Producer state: the position of the next batch to prepare; consumer: of
  // the next batch to hand out.
  std::uint64_t fill_epoch = 0, fill_step = 0;
  std::uint64_t next_epoch = 0, next_step = 0;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  long long generation = 0;  // set_position() discards what was prepared
  std::thread worker;

  // The GPU side (device_index >= 0): two batch buffers there, used in turn,
  // filled on a copy stream of the loader's.
  std::unique_ptr<gpu::CopyStream> copies;
  void* on_device[2] = {nullptr, nullptr};
  std::uint64_t handed = 0;  // batches handed out on the GPU

  const unsigned char* record(std::uint64_t global) const {
    std::size_t f = static_cast<std::size_t>(
        std::upper_bound(starts.begin(), starts.end(), global) - starts.begin() - 1);
    return files[f]->record(global - starts[f]);
  }

  void order_for(std::uint64_t epoch) {
    if (order_epoch == epoch) return;
    order.resize(total);
    std::iota(order.begin(), order.end(), 0);
    if (o.shuffle) {
      std::uint64_t state = o.seed * 0x100000001B3ull + epoch;
      for (std::uint64_t i = total; i > 1; --i) std::swap(order[i - 1], order[splitmix(state) % i]);
    }
    order_epoch = epoch;
  }

  void make(std::uint64_t epoch, std::uint64_t step, unsigned char* batch) {
    order_for(epoch);
    const std::uint64_t first =
        step * global_batch + static_cast<std::uint64_t>(o.rank) * o.batch_per_rank;
    for (int r = 0; r < o.batch_per_rank; ++r)
      std::memcpy(batch + r * o.record_bytes, record(order[first + r]), o.record_bytes);
  }

  void run() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || !free_slots.empty(); });
      if (stop) return;
      const long long gen = generation;
      const std::uint64_t epoch = fill_epoch, step = fill_step;
      const int slot = free_slots.front();
      free_slots.pop_front();
      lock.unlock();
      make(epoch, step, slots[slot]);
      lock.lock();
      if (gen != generation) {  // set_position() moved on meanwhile
        free_slots.push_back(slot);
        continue;
      }
      ready.push_back(slot);
      if (++fill_step == steps) {
        fill_step = 0;
        ++fill_epoch;
      }
      cv.notify_all();
    }
  }

  void release_buffers() {
    for (unsigned char* slot : slots) {
      if (copies)
        gpu::release_pinned(slot);
      else
        delete[] slot;
    }
    for (void* d : on_device)
      if (d) gpu::release(d);
  }
};

Loader::Loader(LoaderOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.o = std::move(options);
  if (m.o.files.empty() || m.o.record_bytes == 0 || m.o.batch_per_rank < 1 || m.o.world_size < 1 ||
      m.o.rank < 0 || m.o.rank >= m.o.world_size || m.o.prefetch < 1) {
    throw Error(ErrorCategory::kInvalidArgument,
                "data::Loader needs files, a record size, batch_per_rank >= 1, 0 <= rank < "
                "world_size and prefetch >= 1");
  }
  for (const std::string& path : m.o.files) {
    m.files.push_back(std::make_unique<ShardFile>(path, m.o.record_bytes));
    m.starts.push_back(m.total);
    m.total += m.files.back()->records();
  }
  m.global_batch = static_cast<std::uint64_t>(m.o.batch_per_rank) * m.o.world_size;
  m.steps = m.total / m.global_batch;
  if (m.steps == 0) {
    throw Error(ErrorCategory::kConfig, "data: the files hold " + std::to_string(m.total) +
                                            " records, fewer than one global batch of " +
                                            std::to_string(m.global_batch) +
                                            " (batch_per_rank x world_size)");
  }
  m.batch_bytes = static_cast<std::size_t>(m.o.batch_per_rank) * m.o.record_bytes;
  try {
    if (m.o.device_index >= 0) {
      m.copies = std::make_unique<gpu::CopyStream>(m.o.device_index, 2);
      for (void*& d : m.on_device) d = gpu::allocate(m.o.device_index, m.batch_bytes);
    }
    for (int i = 0; i <= m.o.prefetch; ++i) {
      m.slots.push_back(m.copies ? static_cast<unsigned char*>(gpu::allocate_pinned(m.batch_bytes))
                                 : new unsigned char[m.batch_bytes]);
      m.free_slots.push_back(i);
    }
  } catch (...) {
    m.release_buffers();
    throw;
  }
  m.worker = std::thread([this] { impl_->run(); });
}

Loader::~Loader() {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.stop = true;
  }
  m.cv.notify_all();
  m.worker.join();
  if (m.copies) {
    try {
      m.copies->wait();  // no copy still reads a slot or writes a GPU buffer
    } catch (const std::exception&) {
    }
  }
  m.release_buffers();
}

const unsigned char* Loader::next() {
  Impl& m = *impl_;
  // The copy of the batch before must be done with its slot; waited for
  // before taking the lock, which the prefetch thread needs meanwhile.
  if (m.current >= 0 && m.copies) m.copies->wait();
  std::unique_lock<std::mutex> lock(m.mu);
  if (m.current >= 0) {
    m.free_slots.push_back(m.current);
    m.current = -1;
    m.cv.notify_all();
  }
  m.cv.wait(lock, [&] { return !m.ready.empty(); });
  m.current = m.ready.front();
  m.ready.pop_front();
  if (++m.next_step == m.steps) {
    m.next_step = 0;
    ++m.next_epoch;
  }
  return m.slots[m.current];
}

const void* Loader::next_on_device(StreamRef stream) {
  Impl& m = *impl_;
  if (!m.copies) {
    throw Error(ErrorCategory::kInvalidArgument,
                "data::Loader::next_on_device needs LoaderOptions::device_index (the GPU)");
  }
  const unsigned char* host = next();
  // GPU buffer b held the batch before last: marker b, recorded on `stream`
  // by the call before, covers the work that read it.
  const int b = static_cast<int>(m.handed % 2);
  if (m.handed > 0) m.copies->after_mark(b);
  m.copies->to_device(host, m.on_device[b], m.batch_bytes);
  m.copies->before(stream);
  m.copies->mark(1 - b, stream);  // after the work on the previous batch: frees its buffer
  ++m.handed;
  return m.on_device[b];
}
std::uint64_t Loader::records() const { return impl_->total; }
std::uint64_t Loader::steps_per_epoch() const { return impl_->steps; }

std::string Loader::position() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return std::to_string(impl_->next_epoch) + ":" + std::to_string(impl_->next_step);
}

void Loader::set_position(const std::string& position) {
  Impl& m = *impl_;
  const auto colon = position.find(':');
  std::uint64_t epoch = 0, step = 0;
  try {
    if (colon == std::string::npos) throw std::invalid_argument("no colon");
    epoch = std::stoull(position.substr(0, colon));
    step = std::stoull(position.substr(colon + 1));
  } catch (const std::exception&) {
    throw Error(ErrorCategory::kConfig,
                "data: position '" + position + "' is not EPOCH:STEP (as position() writes it)");
  }
  if (step >= m.steps) {
    throw Error(ErrorCategory::kConfig,
                "data: position '" + position + "' is past the epoch's " + std::to_string(m.steps) +
                    " steps: the files or the global batch differ from the run that saved it");
  }
  std::lock_guard<std::mutex> lock(m.mu);
  for (int slot : m.ready) m.free_slots.push_back(slot);
  m.ready.clear();
  ++m.generation;
  m.fill_epoch = m.next_epoch = epoch;
  m.fill_step = m.next_step = step;
  m.cv.notify_all();
}

}  // namespace rtd::data
