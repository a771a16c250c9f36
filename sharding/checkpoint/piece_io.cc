// Parallel piece I/O for the Checkpointer (piece_io.h).
#include "sharding/checkpoint/piece_io.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "collectives/device_memory.h"
#include "rt_dist/error.h"
#include "sharding/checkpoint/crc32c.h"
#include "sharding/checkpoint/files.h"
#include "sharding/checkpoint/manifest.h"

namespace rtd::ckpt {
namespace {

// fn(job, worker) for every job in [0, jobs), on at most `threads` threads;
// the first error stops the others taking more jobs and is rethrown.
template <typename Fn>
void run_parallel(std::size_t jobs, int threads, const Fn& fn) {
  const int n = static_cast<int>(std::min<std::size_t>(std::max(threads, 1), jobs));
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&](int worker) {
    for (std::size_t job; !failed && (job = next++) < jobs;) {
      try {
        fn(job, worker);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int w = 1; w < n; ++w) pool.emplace_back(work, w);
  if (n > 0) work(0);
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string out;
  for (auto d : shape) out += (out.empty() ? "" : "x") + std::to_string(d);
  return out.empty() ? std::string("scalar") : out;
}

}  // namespace

std::size_t checked_count(const Tensor& t) {
  std::size_t n = 1;
  for (std::int64_t d : t.shape) {
    if (d < 0)
      throw Error(ErrorCategory::kInvalidArgument, "tensor '" + t.name + "': negative shape");
    n *= static_cast<std::size_t>(d);
  }
  for (const Range& r : t.ranges) {
    if (r.first + r.count > n || (r.count > 0 && r.data == nullptr)) {
      throw Error(ErrorCategory::kInvalidArgument,
                  "tensor '" + t.name + "': range [" + std::to_string(r.first) + ", " +
                      std::to_string(r.first + r.count) + ") is outside its " + std::to_string(n) +
                      " elements or has no data");
    }
  }
  return n;
}

void HostBuffer::reserve(std::size_t bytes, bool pinned) {
  if (bytes <= size_ && pinned == pinned_) return;
  release();
  data_ = pinned ? static_cast<char*>(gpu::allocate_pinned(bytes)) : new char[bytes];
  size_ = bytes;
  pinned_ = pinned;
}

void HostBuffer::release() {
  if (pinned_)
    gpu::release_pinned(data_);
  else
    delete[] data_;
  data_ = nullptr;
  size_ = 0;
}

namespace {

// File k of a rank's part: `path` itself, then "rank_00003.1.bin", ... .
std::string part_file(const std::string& path, std::size_t k) {
  if (k == 0) return path;
  const std::filesystem::path p(path);
  return (p.parent_path() / (p.stem().string() + "." + std::to_string(k) + p.extension().string()))
      .string();
}

}  // namespace

proto::CheckpointRankPart write_pieces(const std::string& path, const State& state,
                                       std::size_t piece_bytes, int threads) {
  struct Job {
    const char* data;
    std::size_t bytes;
    const Range* range;
    proto::CheckpointPiece* piece;
  };
  proto::CheckpointRankPart part;
  std::vector<Job> jobs;
  std::size_t largest = 0;
  for (const Tensor& t : state.tensors) {
    checked_count(t);
    proto::CheckpointTensor* out = part.add_tensors();
    out->set_name(t.name);
    out->set_dtype(dtype_name(t.dtype));
    for (std::int64_t d : t.shape) out->add_shape(d);
    const std::size_t esize = dtype_size(t.dtype);
    const std::size_t per_piece = std::max<std::size_t>(1, piece_bytes / esize);
    for (const Range& r : t.ranges) {
      for (std::size_t done = 0; done < r.count;) {
        const std::size_t n = std::min(per_piece, r.count - done);
        proto::CheckpointPiece* p = out->add_pieces();  // its address stays valid
        p->set_first(r.first + done);
        p->set_count(n);
        jobs.push_back(Job{static_cast<const char*>(r.data) + done * esize, n * esize, &r, p});
        largest = std::max(largest, n * esize);
        done += n;
      }
    }
  }
  // Pieces dealt to the files in turn, so that the pieces in flight at once
  // (taken in order by the threads) are in different files.
  const std::size_t files = std::clamp<std::size_t>(static_cast<std::size_t>(std::max(threads, 1)),
                                                    1, std::max<std::size_t>(jobs.size(), 1));
  std::vector<std::size_t> sizes(files, 0);
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const std::size_t f = i % files;
    jobs[i].piece->set_file(static_cast<int>(f));
    jobs[i].piece->set_offset(sizes[f]);
    sizes[f] += jobs[i].bytes;
  }
  std::vector<std::unique_ptr<FileWriter>> writers;
  try {
    for (std::size_t f = 0; f < files; ++f)
      writers.push_back(std::make_unique<FileWriter>(part_file(path, f)));
    std::vector<HostBuffer> staging(static_cast<std::size_t>(std::max(threads, 1)));
    run_parallel(jobs.size(), threads, [&](std::size_t i, int worker) {
      const Job& job = jobs[i];
      const char* data = job.data;
      if (job.range->device == DeviceType::kCuda) {
        HostBuffer& s = staging[worker];
        s.reserve(largest, true);
        gpu::copy_to_host(data, s.data(), job.bytes, job.range->device_index);
        data = s.data();
      }
      job.piece->set_crc32c(crc32c(data, job.bytes));
      writers[job.piece->file()]->write_at(job.piece->offset(), data, job.bytes);
    });
    for (auto& w : writers) w->close();
  } catch (...) {
    writers.clear();
    std::error_code ignored;
    for (std::size_t f = 0; f < files; ++f) std::filesystem::remove(part_file(path, f), ignored);
    throw;
  }
  for (std::size_t f = 0; f < files; ++f) {
    proto::CheckpointFile* out = part.add_files();
    out->set_name(std::filesystem::path(part_file(path, f)).filename().string());
    out->set_bytes(sizes[f]);
  }
  return part;
}

void read_pieces(const std::string& dir, const proto::CheckpointManifest& manifest, State& state,
                 int threads, bool check_first) {
  // Where each needed piece's bytes go: [from, from + bytes) of the piece to `to`.
  struct Segment {
    std::size_t from;
    char* to;
    std::size_t bytes;
    const Range* range;
  };
  struct Job {
    const proto::CheckpointTensor* tensor;
    const proto::CheckpointPiece* piece;
    std::size_t bytes;
    std::vector<Segment> segments;
  };
  std::map<std::string, const proto::CheckpointTensor*> by_name;
  for (const auto& t : manifest.tensors()) by_name[t.name()] = &t;
  std::vector<Job> jobs;
  std::map<const proto::CheckpointPiece*, std::size_t> job_of;
  std::size_t largest = 0;
  bool to_gpu = false;
  for (Tensor& t : state.tensors) {
    checked_count(t);
    auto it = by_name.find(t.name);
    if (it == by_name.end())
      throw Error(ErrorCategory::kConfig, "checkpoint " + dir + " has no tensor '" + t.name + "'");
    const proto::CheckpointTensor& saved = *it->second;
    const std::vector<std::int64_t> shape(saved.shape().begin(), saved.shape().end());
    if (saved.dtype() != dtype_name(t.dtype) || shape != t.shape) {
      throw Error(ErrorCategory::kConfig, "checkpoint " + dir + ": tensor '" + t.name + "' is " +
                                              saved.dtype() + " " + shape_text(shape) +
                                              " there, but the model's is " + dtype_name(t.dtype) +
                                              " " + shape_text(t.shape));
    }
    std::vector<const proto::CheckpointPiece*> sorted;
    for (const auto& p : saved.pieces()) sorted.push_back(&p);
    std::sort(sorted.begin(), sorted.end(),
              [](auto* a, auto* b) { return a->first() < b->first(); });
    const std::size_t esize = dtype_size(t.dtype);
    for (Range& r : t.ranges) {
      // Each element from the first piece (by start) that holds it.
      const std::size_t end = r.first + r.count;
      std::size_t next = r.first, covered = 0;
      for (const proto::CheckpointPiece* p : sorted) {
        if (p->first() >= end) break;
        const std::size_t lo = std::max<std::size_t>(next, p->first());
        const std::size_t hi = std::min<std::size_t>(end, p->first() + p->count());
        if (lo >= hi) continue;
        auto [at, added] = job_of.emplace(p, jobs.size());
        if (added) jobs.push_back(Job{&saved, p, p->count() * esize, {}});
        jobs[at->second].segments.push_back(
            Segment{(lo - p->first()) * esize, static_cast<char*>(r.data) + (lo - r.first) * esize,
                    (hi - lo) * esize, &r});
        largest = std::max(largest, p->count() * esize);
        to_gpu = to_gpu || r.device == DeviceType::kCuda;
        covered += hi - lo;
        next = hi;
      }
      if (covered < r.count) {
        throw Error(ErrorCategory::kConfig, "checkpoint " + dir + ": tensor '" + t.name +
                                                "' elements [" + std::to_string(r.first) + ", " +
                                                std::to_string(end) + ") are not all stored (" +
                                                std::to_string(covered) + " of " +
                                                std::to_string(r.count) + " found)");
      }
    }
  }
  PieceReader reader(dir, manifest);
  std::vector<HostBuffer> staging(static_cast<std::size_t>(std::max(threads, 1)));
  // With check_first every piece is checked before any range is written, so
  // that a checkpoint that fails leaves the caller's state as it was (the
  // second read comes from the page cache, and is not checked again).
  if (check_first) {
    run_parallel(jobs.size(), threads, [&](std::size_t i, int worker) {
      HostBuffer& s = staging[worker];
      s.reserve(largest, to_gpu);
      reader.read(*jobs[i].tensor, *jobs[i].piece, s.data());
    });
  }
  const bool check = !check_first;
  run_parallel(jobs.size(), threads, [&](std::size_t i, int worker) {
    const Job& job = jobs[i];
    const Segment& first = job.segments.front();
    if (job.segments.size() == 1 && first.from == 0 && first.bytes == job.bytes &&
        first.range->device == DeviceType::kCpu) {
      reader.read(*job.tensor, *job.piece, first.to, check);  // straight into place
      return;
    }
    HostBuffer& s = staging[worker];
    s.reserve(largest, to_gpu);
    reader.read(*job.tensor, *job.piece, s.data(), check);
    for (const Segment& seg : job.segments) {
      if (seg.range->device == DeviceType::kCuda)
        gpu::copy_from_host(s.data() + seg.from, seg.to, seg.bytes, seg.range->device_index);
      else
        std::copy_n(s.data() + seg.from, seg.bytes, seg.to);
    }
  });
}

}  // namespace rtd::ckpt
