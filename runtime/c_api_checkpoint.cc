// The C interface's checkpoints (rt_dist/c_api.h): rtd::ckpt::Checkpointer
// over the caller's store callbacks, every tensor and range checked at the
// door, and the newest readable manifest for callers that plan a load from it
// (rt_dist.torch.checkpoint's reader).
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "rt_dist/c_api.h"
#include "rt_dist/checkpoint.h"
#include "runtime/c_api_errors.h"
#include "runtime/c_api_store.h"
#include "runtime/core/log.h"
#include "sharding/checkpoint/manifest.h"

struct rtd_ckpt {
  std::unique_ptr<rtd::c_api::CallbackStore> store;
  std::unique_ptr<rtd::ckpt::Checkpointer> checkpointer;
};

namespace {

using rtd::Error;
using rtd::ErrorCategory;
using rtd::c_api::guarded;

constexpr std::int64_t kMaxTensors = std::int64_t{1} << 24;
constexpr std::int64_t kMaxRanges = std::int64_t{1} << 26;
constexpr int kMaxDims = 64;

[[noreturn]] void refuse(const std::string& why) {
  throw Error(ErrorCategory::kInvalidArgument, "checkpoint: " + why);
}

rtd::ckpt::Checkpointer& checked(rtd_ckpt* ckpt) {
  if (!ckpt || !ckpt->checkpointer) refuse("the checkpointer is NULL");
  return *ckpt->checkpointer;
}

// The caller's tensors as a State; ranges are checked against the shape by
// the Checkpointer itself (checked_count), names and counts here.
rtd::ckpt::State state_of(const rtd_ckpt_tensor* tensors, std::int64_t n) {
  if (n < 0 || n > kMaxTensors || (n > 0 && !tensors))
    refuse(std::to_string(n) + " tensors at " + (tensors ? "an address" : "NULL"));
  rtd::ckpt::State state;
  std::int64_t ranges = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const rtd_ckpt_tensor& t = tensors[i];
    const std::string which = "tensor " + std::to_string(i);
    if (!t.name || !*t.name) refuse(which + " has no name");
    if (t.dtype < RTD_FLOAT32 || t.dtype > RTD_FLOAT16)
      refuse(which + " ('" + t.name + "'): dtype " + std::to_string(t.dtype) +
             " is not one of rt_dist's");
    if (t.ndim < 0 || t.ndim > kMaxDims || (t.ndim > 0 && !t.shape))
      refuse(which + " ('" + t.name + "'): " + std::to_string(t.ndim) + " dimensions");
    if (t.n_ranges < 0 || (t.n_ranges > 0 && !t.ranges) || (ranges += t.n_ranges) > kMaxRanges)
      refuse(which + " ('" + t.name + "'): " + std::to_string(t.n_ranges) + " ranges");
    rtd::ckpt::Tensor tensor{t.name,
                             static_cast<rtd::DType>(t.dtype),
                             std::vector<std::int64_t>(t.shape, t.shape + t.ndim),
                             {}};
    for (std::int64_t j = 0; j < t.n_ranges; ++j) {
      const rtd_ckpt_range& r = t.ranges[j];
      if (r.first < 0 || r.count < 0)
        refuse("tensor '" + tensor.name + "': range " + std::to_string(j) + " is negative");
      tensor.ranges.push_back(
          rtd::ckpt::Range{static_cast<std::size_t>(r.first), static_cast<std::size_t>(r.count),
                           r.data, r.device < 0 ? rtd::DeviceType::kCpu : rtd::DeviceType::kCuda,
                           r.device < 0 ? 0 : r.device});
    }
    state.tensors.push_back(std::move(tensor));
  }
  return state;
}

}  // namespace

extern "C" {

rtd_ckpt* rtd_ckpt_create(const rtd_store_ops* ops, int rank, int size,
                          const rtd_ckpt_options* options) {
  return guarded<rtd_ckpt*>(nullptr, [&] {
    rtd::c_api::check_store_ops(ops);
    if (size < 1 || rank < 0 || rank >= size)
      refuse("rank " + std::to_string(rank) + " of " + std::to_string(size));
    if (!options || !options->dir || !*options->dir) refuse("no directory");
    if (options->keep_last < 0 || options->io_threads < 1 || options->io_threads > 1024 ||
        options->piece_bytes < 1)
      refuse("keep_last " + std::to_string(options->keep_last) + ", io_threads " +
             std::to_string(options->io_threads) + ", piece_bytes " +
             std::to_string(options->piece_bytes) +
             ": keep_last >= 0, io_threads in [1, 1024], piece_bytes >= 1");
    auto handle = std::make_unique<rtd_ckpt>();
    handle->store = std::make_unique<rtd::c_api::CallbackStore>(*ops);
    rtd::ckpt::Options o;
    o.dir = options->dir;
    o.keep_last = options->keep_last;
    o.io_threads = options->io_threads;
    o.piece_bytes = static_cast<std::size_t>(options->piece_bytes);
    handle->checkpointer =
        std::make_unique<rtd::ckpt::Checkpointer>(*handle->store, rank, size, std::move(o));
    return handle.release();
  });
}

int rtd_ckpt_save(rtd_ckpt* ckpt, int64_t step, const rtd_ckpt_tensor* tensors, int64_t n,
                  const char* const* meta, int64_t n_meta) {
  return guarded<int>(1, [&] {
    rtd::ckpt::Checkpointer& checkpointer = checked(ckpt);
    if (step < 0) refuse("step " + std::to_string(step) + " is negative");
    rtd::ckpt::State state = state_of(tensors, n);
    if (n_meta < 0 || n_meta > kMaxTensors || (n_meta > 0 && !meta))
      refuse(std::to_string(n_meta) + " meta entries");
    for (std::int64_t i = 0; i < n_meta; ++i) {
      if (!meta[2 * i] || !meta[2 * i + 1]) refuse("meta entry " + std::to_string(i) + " is NULL");
      state.meta[meta[2 * i]] = meta[2 * i + 1];
    }
    checkpointer.save(step, state);
    return 0;
  });
}

int rtd_ckpt_load(rtd_ckpt* ckpt, const rtd_ckpt_tensor* tensors, int64_t n, int64_t newest,
                  int fallback, int64_t* step,
                  void (*on_meta)(void* arg, const char* key, const char* value), void* arg) {
  return guarded<int>(1, [&] {
    rtd::ckpt::Checkpointer& checkpointer = checked(ckpt);
    if (!step) refuse("no place for the step");
    rtd::ckpt::State state = state_of(tensors, n);
    const std::optional<std::int64_t> loaded = checkpointer.load(
        state, fallback != 0, newest < 0 ? std::nullopt : std::optional<std::int64_t>(newest));
    *step = loaded.value_or(-1);
    if (on_meta) {
      for (const auto& [key, value] : state.meta) on_meta(arg, key.c_str(), value.c_str());
    }
    return 0;
  });
}

void rtd_ckpt_destroy(rtd_ckpt* ckpt) {
  delete ckpt;  // the Checkpointer's destructor waits for a background save, and logs its error
}

char* rtd_ckpt_read_manifest(const char* dir, int64_t newest, int64_t* step) {
  return guarded<char*>(nullptr, [&]() -> char* {
    if (!dir || !*dir) refuse("no directory");
    if (!step) refuse("no place for the step");
    std::string tried;
    for (std::int64_t s : rtd::ckpt::list_checkpoints(dir)) {
      if (newest >= 0 && s > newest) continue;
      const std::string path = std::string(dir) + "/" + rtd::ckpt::step_dir_name(s);
      try {
        const std::string json = rtd::ckpt::manifest_to_json(rtd::ckpt::read_manifest(path));
        if (!tried.empty())
          rtd::log::get("checkpoint")
              ->warn("using {}: the newer ones cannot be read ({})", path, tried);
        char* out = static_cast<char*>(std::malloc(json.size() + 1));
        if (!out) throw std::bad_alloc();
        std::memcpy(out, json.c_str(), json.size() + 1);
        *step = s;
        return out;
      } catch (const Error& e) {
        tried += (tried.empty() ? "" : "; ") + std::string(e.what());
      }
    }
    throw Error(ErrorCategory::kConfig,
                std::string("no checkpoint in ") + dir +
                    (newest >= 0 ? " of step " + std::to_string(newest) + " or older" : "") +
                    (tried.empty() ? " (none is committed there)" : " can be read: " + tried));
  });
}

void rtd_free(void* p) { std::free(p); }

}  // extern "C"
