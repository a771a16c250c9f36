// The loader: shard files, the distributed sampler, and the prefetch thread.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <numeric>
#include <thread>

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
  // The epoch whose order is in `order`.
  std::uint64_t order_epoch = ~0ull;
  std::vector<std::uint64_t> order;

  // Producer state: the position of the next batch to prepare; consumer: of
  // the next batch to hand out.
  std::uint64_t fill_epoch = 0, fill_step = 0;
  std::uint64_t next_epoch = 0, next_step = 0;
  std::deque<std::vector<unsigned char>> ready;
  std::vector<unsigned char> current;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  long long generation = 0;  // set_position() discards what was prepared
  std::thread worker;

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

  std::vector<unsigned char> make(std::uint64_t epoch, std::uint64_t step) {
    order_for(epoch);
    std::vector<unsigned char> batch(static_cast<std::size_t>(o.batch_per_rank) * o.record_bytes);
    const std::uint64_t first =
        step * global_batch + static_cast<std::uint64_t>(o.rank) * o.batch_per_rank;
    for (int r = 0; r < o.batch_per_rank; ++r)
      std::memcpy(batch.data() + r * o.record_bytes, record(order[first + r]), o.record_bytes);
    return batch;
  }

  void run() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || static_cast<int>(ready.size()) < o.prefetch; });
      if (stop) return;
      const long long gen = generation;
      const std::uint64_t epoch = fill_epoch, step = fill_step;
      lock.unlock();
      auto batch = make(epoch, step);
      lock.lock();
      if (gen != generation) continue;  // set_position() moved on meanwhile
      ready.push_back(std::move(batch));
      if (++fill_step == steps) {
        fill_step = 0;
        ++fill_epoch;
      }
      cv.notify_all();
    }
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
  m.worker = std::thread([this] { impl_->run(); });
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  impl_->worker.join();
}

const unsigned char* Loader::next() {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.mu);
  m.cv.wait(lock, [&] { return !m.ready.empty(); });
  m.current = std::move(m.ready.front());
  m.ready.pop_front();
  if (++m.next_step == m.steps) {
    m.next_step = 0;
    ++m.next_epoch;
  }
  m.cv.notify_all();
  return m.current.data();
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
  m.ready.clear();
  ++m.generation;
  m.fill_epoch = m.next_epoch = epoch;
  m.fill_step = m.next_step = step;
  m.cv.notify_all();
}

}  // namespace rtd::data
