// Checkpointer: the collective save and load of docs/checkpoints.md.
//
// save, as the n-th save of this Checkpointer (every rank counts alike), under
// "ckpt/<dir>/save<n>/" in the store (so one Checkpointer per directory in a
// store: a restarted job's store is a fresh round):
//   1. rank 0 takes the directory for this job at its first save (DirLock),
//      makes step_<S>.tmp/ (stale leftovers removed) and says "dir";
//   2. every rank writes rank_<r>.bin there (pieces of at most piece_bytes,
//      each with its CRC-32C), fsyncs it and publishes what it wrote ("part/<r>");
//   3. rank 0 merges the parts into manifest.json (with its own CRC-32C),
//      fsyncs the directory, puts it in place as step_<S>/ (exchanged with
//      an old step_<S>/ at once), points `latest` at it (write, fsync,
//      rename), removes checkpoints beyond keep_last, removes the keys every
//      rank has read (this save's dir and parts, the last save's done), and
//      says "done".
// A rank's error is published in its key ("!why"), so that every rank throws
// it; a failed save's temporary directory is removed.
//
// load, as the n-th load, under "ckpt/<dir>/load<n>/": rank 0 lists the committed
// checkpoints, newest first ("candidates"); for each, every rank fills its
// ranges and says whether it could ("<i>/<r>"); all could: done; else, with
// fallback, the next one.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>
#include <utility>

#include "collectives/device_memory.h"
#include "rt_dist/checkpoint.h"
#include "rt_dist/error.h"
#include "runtime/core/log.h"
#include "sharding/checkpoint/manifest.h"
#include "sharding/checkpoint/piece_io.h"

namespace rtd::ckpt {
namespace fs = std::filesystem;

namespace {

constexpr std::chrono::minutes kWait{30};  // a save of a large model on a slow disk

std::string error_of(const std::string& value) { return value.substr(1); }
bool is_error(const std::string& value) { return !value.empty() && value[0] == '!'; }

std::string rank_file_name(int rank) {
  char text[32];
  std::snprintf(text, sizeof(text), "rank_%05d.bin", rank);
  return text;
}

// Fills every range of `state` from the checkpoint in `dir`; throws naming what failed.
std::int64_t read_state(const std::string& dir, State& state, const Options& o) {
  const proto::CheckpointManifest manifest = read_manifest(dir);
  read_pieces(dir, manifest, state, o.io_threads, o.check_before_load);
  state.meta.clear();
  for (const auto& [k, v] : manifest.meta()) state.meta[k] = v;
  return manifest.step();
}

}  // namespace

std::vector<std::int64_t> list_checkpoints(const std::string& dir) {
  std::vector<std::int64_t> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step_", 0) != 0 || name.find('.') != std::string::npos) continue;
    try {
      std::size_t used = 0;
      const long long step = std::stoll(name.substr(5), &used);
      if (used == name.size() - 5 && fs::exists(entry.path() / kManifestName))
        steps.push_back(step);
    } catch (const std::exception&) {
    }
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

struct Checkpointer::Impl {
  Impl(Store& s, int r, int w, Options o)
      : store(s), rank(r), world_size(w), options(std::move(o)) {}
  Store& store;
  int rank;
  int world_size;
  Options options;
  int saves = 0;
  int loads = 0;
  // The background save: its thread, its own copy of the state (in `arena`,
  // kept from save to save so that only the first pays for new memory), its
  // error.
  std::thread background;
  State copy;
  HostBuffer arena;
  // The side streams save_async copies GPU ranges on, one per device.
  std::map<int, std::unique_ptr<gpu::CopyStream>> copies;
  std::exception_ptr error;
  std::unique_ptr<DirLock> lock;  // rank 0's, from the first save on
  std::string series;             // rank 0's, with the lock

  std::string save_prefix(int n) const {
    return "ckpt/" + options.dir + "/save" + std::to_string(n) + "/";
  }
  // A save's keys are read by then (see save_now): the store keeps O(world) keys, not
  // O(saves x world).
  void forget_keys(int n) {
    try {
      const std::string prefix = save_prefix(n);
      store.remove(prefix + "dir");
      for (int r = 0; r < world_size; ++r) store.remove(prefix + "part/" + std::to_string(r));
      if (n > 0) store.remove(save_prefix(n - 1) + "done");
    } catch (const std::exception& e) {
      log::get("checkpoint")->warn("could not remove a save's keys from the store: {}", e.what());
    }
  }

  // Every rank's value of prefix + "<r>", in rank order.
  std::vector<std::string> gather(const std::string& prefix) {
    std::vector<std::string> out;
    for (int r = 0; r < world_size; ++r)
      out.push_back(store.get(prefix + std::to_string(r), kWait));
    return out;
  }

  // Takes the directory for this job at its first save, and puts back a
  // checkpoint that a crash left aside while the same step was saved again.
  void prepare_dir() {
    // Removed while this job held it (by hand, a cleanup script): made again
    // and taken again, as at a first save, rather than every save failing.
    if (lock && !fs::exists(fs::path(options.dir) / ".lock")) {
      log::get("checkpoint")
          ->warn("{} was removed while this job saved there; making it again", options.dir);
      lock.reset();
    }
    const bool first = !lock;
    if (first) create_dirs_durably(options.dir);
    refuse_links(options.dir);  // at every save: a link planted meanwhile too
    if (first) {
      lock = std::make_unique<DirLock>(options.dir);
      if (!lock->taken_over().empty())
        log::get("checkpoint")
            ->info("took over {}: its lock was left by a job that ended ({})", options.dir,
                   lock->taken_over());
      take_series();
    }
    for (const auto& entry : fs::directory_iterator(options.dir)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("step_", 0) != 0) continue;
      // The directory is this job's now: a save's temporary left there was
      // cut short (a job stopped or killed mid-save) and is nobody's.
      if (first && entry.path().extension() == ".tmp") {
        log::get("checkpoint")->info("removing {}, a save cut short", entry.path().string());
        fs::remove_all(entry.path());
        continue;
      }
      if (entry.path().extension() != ".old") continue;
      const fs::path base = entry.path().parent_path() / entry.path().stem();
      if (fs::exists(base))
        fs::remove_all(entry.path());
      else
        fs::rename(entry.path(), base);
    }
  }

  // The directory's series, written into every manifest saved here; a
  // directory without one (new, or saved before series were written) takes
  // its newest readable step's, else a new one.
  void take_series() {
    series = read_series(options.dir);
    if (!series.empty()) return;
    for (std::int64_t step : list_checkpoints(options.dir)) {
      try {
        series = read_manifest((fs::path(options.dir) / step_dir_name(step)).string()).series();
      } catch (const Error&) {
        continue;  // a damaged step does not name the series
      }
      break;
    }
    if (series.empty()) series = new_series();
    replace_file((fs::path(options.dir) / kSeriesName).string(), series + "\n");
  }

  // Puts the new step_<S>/ in place; a step saved again replaces the old one
  // at once (an atomic exchange, or where the filesystem has none, a rename
  // aside that prepare_dir() undoes after a crash).
  void put_in_place(const std::string& tmp, const fs::path& final_dir) {
    if (!fs::exists(final_dir)) {
      fs::rename(tmp, final_dir);
    } else if (exchange_entries(tmp, final_dir.string())) {
      fsync_dir(options.dir);
      fs::remove_all(tmp);  // the old one, now under the temporary name
    } else {
      const fs::path aside = final_dir.string() + ".old";
      fs::remove_all(aside);
      fs::rename(final_dir, aside);
      fs::rename(tmp, final_dir);
      fsync_dir(options.dir);
      fs::remove_all(aside);
    }
    fsync_dir(options.dir);
  }

  // Returns what went wrong after the commit (the checkpoint is saved all the same).
  std::vector<std::string> commit(std::int64_t step, const std::string& tmp, const State& state,
                                  const std::vector<std::string>& parts) {
    proto::CheckpointManifest manifest;
    manifest.set_format_version(kFormatVersion);
    manifest.set_step(step);
    manifest.set_world_size(world_size);
    manifest.set_series(series);
    for (const auto& [k, v] : state.meta) (*manifest.mutable_meta())[k] = v;
    std::map<std::string, proto::CheckpointTensor*> by_name;
    for (int r = 0; r < world_size; ++r) {
      proto::CheckpointRankPart part;
      if (!part.ParseFromString(parts[r]))
        throw Error(ErrorCategory::kInternal, "rank " + std::to_string(r) + "'s part is malformed");
      const int first_file = manifest.files_size();
      for (const auto& f : part.files()) *manifest.add_files() = f;
      for (const auto& t : part.tensors()) {
        proto::CheckpointTensor*& merged = by_name[t.name()];
        if (!merged) {
          merged = manifest.add_tensors();
          merged->set_name(t.name());
          merged->set_dtype(t.dtype());
          *merged->mutable_shape() = t.shape();
        } else if (merged->dtype() != t.dtype() ||
                   !std::equal(merged->shape().begin(), merged->shape().end(), t.shape().begin(),
                               t.shape().end())) {
          throw Error(ErrorCategory::kInvalidArgument,
                      "ranks disagree on tensor '" + t.name() + "' (dtype or shape)");
        }
        for (auto p : t.pieces()) {
          if (p.file() < 0 || p.file() >= part.files_size())
            throw Error(ErrorCategory::kInternal,
                        "rank " + std::to_string(r) + "'s part names a file it has not");
          p.set_file(first_file + p.file());
          *merged->add_pieces() = p;
        }
      }
    }
    replace_file(tmp + "/" + kManifestName, manifest_to_json(manifest));
    fsync_dir(tmp);
    put_in_place(tmp, fs::path(options.dir) / step_dir_name(step));
    std::vector<std::string> warnings;
    try {
      replace_file(options.dir + "/latest", latest_text(step));
    } catch (const std::exception& e) {
      warnings.push_back(std::string("could not point `latest` at it: ") + e.what());
    }
    try {
      if (options.keep_last > 0) {
        const auto steps = list_checkpoints(options.dir);
        for (std::size_t i = options.keep_last; i < steps.size(); ++i)
          fs::remove_all(fs::path(options.dir) / step_dir_name(steps[i]));
      }
    } catch (const std::exception& e) {
      warnings.push_back(std::string("could not remove the older checkpoints: ") + e.what());
    }
    return warnings;
  }
};

Checkpointer::Checkpointer(Store& store, int rank, int world_size, Options options)
    : impl_(std::make_unique<Impl>(store, rank, world_size, std::move(options))) {
  if (impl_->options.dir.empty())
    throw Error(ErrorCategory::kInvalidArgument, "Checkpointer needs a directory");
}

Checkpointer::~Checkpointer() {
  try {
    wait();
  } catch (const std::exception& e) {
    log::get("checkpoint")->error("the last background save failed: {}", e.what());
  }
}

void Checkpointer::wait() {
  Impl& m = *impl_;
  if (m.background.joinable()) m.background.join();
  m.copy = State{};
  if (m.error) std::rethrow_exception(std::exchange(m.error, nullptr));
}

void Checkpointer::save_async(std::int64_t step, const State& state, StreamRef stream) {
  wait();
  Impl& m = *impl_;
  std::size_t total = 0;
  for (const Tensor& t : state.tensors) {
    checked_count(t);
    for (const Range& r : t.ranges) {
      total += r.count * dtype_size(t.dtype);
      if (r.device == DeviceType::kCuda && !m.copies[r.device_index])
        m.copies[r.device_index] = std::make_unique<gpu::CopyStream>(r.device_index, 0);
    }
  }
  m.arena.reserve(total, !m.copies.empty());
  m.copy.meta = state.meta;
  // GPU ranges: copied on the side streams after the work queued on `stream`;
  // what the caller queues there next waits for the copies, the host does not.
  for (auto& [device, c] : m.copies) c->after(stream);
  std::size_t at = 0;
  for (const Tensor& t : state.tensors) {
    Tensor c{t.name, t.dtype, t.shape, {}};
    for (const Range& r : t.ranges) {
      const std::size_t bytes = r.count * dtype_size(t.dtype);
      if (r.device == DeviceType::kCuda)
        m.copies[r.device_index]->to_host(r.data, m.arena.data() + at, bytes);
      else
        std::memcpy(m.arena.data() + at, r.data, bytes);
      c.ranges.push_back(Range{r.first, r.count, m.arena.data() + at});
      at += bytes;
    }
    m.copy.tensors.push_back(std::move(c));
  }
  for (auto& [device, c] : m.copies) c->before(stream);
  m.background = std::thread([this, step] {
    try {
      for (auto& [device, c] : impl_->copies) c->wait();
      save_now(step, impl_->copy);
    } catch (...) {
      impl_->error = std::current_exception();
    }
  });
}

void Checkpointer::save(std::int64_t step, const State& state) {
  wait();
  save_now(step, state);
}

void Checkpointer::save_now(std::int64_t step, const State& state) {
  Impl& m = *impl_;
  const int n = m.saves++;
  const std::string prefix = m.save_prefix(n);
  const std::string tmp = m.options.dir + "/" + step_dir_name(step) + ".tmp";
  if (m.rank == 0) {
    std::string said = "ok";
    try {
      m.prepare_dir();
      fs::remove_all(tmp);
      fs::create_directory(tmp);
      fsync_dir(m.options.dir);
    } catch (const std::exception& e) {
      said = std::string("!rank 0 cannot prepare ") + tmp + ": " + e.what();
    }
    m.store.set(prefix + "dir", said);
  }
  const std::string dir_said = m.store.get(prefix + "dir", kWait);
  if (is_error(dir_said)) return failed(step, error_of(dir_said));
  std::string part;
  const std::string file = tmp + "/" + rank_file_name(m.rank);
  try {
    write_pieces(file, state, m.options.piece_bytes, m.options.io_threads).SerializeToString(&part);
  } catch (const std::exception& e) {
    std::size_t bytes = 0;
    for (const Tensor& t : state.tensors) {
      for (const Range& r : t.ranges) bytes += r.count * dtype_size(t.dtype);
    }
    part = "!rank " + std::to_string(m.rank) + ": " + e.what() +
           " (its part: " + std::to_string(bytes) + " bytes)";  // write_pieces removed its files
  }
  m.store.set(prefix + "part/" + std::to_string(m.rank), part);
  if (m.rank == 0) {
    std::string done = "ok";
    try {
      const auto parts = m.gather(prefix + "part/");
      for (const auto& p : parts) {
        if (is_error(p)) throw Error(ErrorCategory::kBackend, error_of(p));
      }
      for (const std::string& w : m.commit(step, tmp, state, parts))
        log::get("checkpoint")->warn("saved step {} in {}, but {}", step, m.options.dir, w);
      log::get("checkpoint")->info("saved step {} in {}", step, m.options.dir);
    } catch (const std::exception& e) {
      std::error_code ignored;
      fs::remove_all(tmp, ignored);  // a failed save leaves nothing behind
      done = std::string("!") + e.what() + "; " + std::to_string(free_bytes(m.options.dir)) +
             " bytes are free in " + m.options.dir;
    }
    m.forget_keys(n);
    m.store.set(prefix + "done", done);
  }
  const std::string done = m.store.get(prefix + "done", kWait);
  if (is_error(done)) failed(step, error_of(done));
}

void Checkpointer::failed(std::int64_t step, const std::string& why) {
  const std::string what = "checkpoint of step " + std::to_string(step) + " not saved: " + why;
  if (!impl_->options.continue_after_failed_save) throw Error(ErrorCategory::kBackend, what);
  if (impl_->rank == 0)
    log::get("checkpoint")->error("{}; training goes on (continue_after_failed_save)", what);
}

std::optional<std::int64_t> Checkpointer::load(State& state, bool fallback,
                                               std::optional<std::int64_t> newest) {
  wait();
  Impl& m = *impl_;
  const std::string prefix = "ckpt/" + m.options.dir + "/load" + std::to_string(m.loads++) + "/";
  if (m.rank == 0) {
    std::string list;
    for (std::int64_t step : list_checkpoints(m.options.dir)) {
      if (!newest || step <= *newest) list += (list.empty() ? "" : ",") + std::to_string(step);
    }
    m.store.set(prefix + "candidates", list.empty() ? "-" : list);
  }
  std::vector<std::int64_t> candidates;
  {
    std::string list = m.store.get(prefix + "candidates", kWait);
    std::stringstream items(list == "-" ? "" : list);
    for (std::string item; std::getline(items, item, ',');) candidates.push_back(std::stoll(item));
  }
  if (candidates.empty()) return std::nullopt;
  std::string errors;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const std::string dir = m.options.dir + "/" + step_dir_name(candidates[i]);
    std::string mine = "ok";
    try {
      read_state(dir, state, m.options);
    } catch (const std::exception& e) {
      mine = std::string("!rank ") + std::to_string(m.rank) + ": " + e.what();
    }
    const std::string key = prefix + std::to_string(i) + "/";
    m.store.set(key + std::to_string(m.rank), mine);
    std::string first_error;
    for (const auto& said : m.gather(key)) {
      if (is_error(said) && first_error.empty()) first_error = error_of(said);
    }
    if (first_error.empty()) return candidates[i];
    errors += (errors.empty() ? "" : "; ") + first_error;
    if (!fallback) break;
    if (i + 1 < candidates.size()) {
      log::get("checkpoint")->warn("cannot load {}: {}; trying the one before", dir, first_error);
    }
  }
  throw Error(ErrorCategory::kConfig,
              "no checkpoint in " + m.options.dir + " could be loaded: " + errors +
                  (fallback ? "" : " (load with fallback to try older ones)"));
}

}  // namespace rtd::ckpt
