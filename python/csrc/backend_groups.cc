// BackendRTD's groups made from a group: split (torch.distributed.split_group)
// and shrink (torch.distributed.shrink_group). Neither is a collective here:
// the new backend makes its communicators at its first call, on its own
// store keys, with the ranks that are in it.
#include <algorithm>
#include <string>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "backend.h"

namespace rtd_torch {
namespace {

std::chrono::milliseconds timeout_of(const c10::intrusive_ptr<c10d::Backend::Options>& opts,
                                     std::chrono::milliseconds fallback) {
  return opts && opts->timeout.count() > 0 ? opts->timeout : fallback;
}

}  // namespace

c10::intrusive_ptr<c10d::Backend::Options> BackendRTD::getBackendOptions() {
  std::lock_guard<std::mutex> lock(mu_);
  return c10::make_intrusive<OptionsRTD>(timeout_);
}

c10::intrusive_ptr<c10d::Backend> BackendRTD::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                    const std::vector<int>& ranks,
                                                    const c10::intrusive_ptr<Options>& opts) {
  std::lock_guard<std::mutex> lock(groups_mu_);
  // torch asks once per device type this backend serves (CPU and CUDA), with
  // the same store: one backend answers both, or the two would make their
  // communicators on the same keys.
  if (last_split_) {
    c10::intrusive_ptr<c10d::Backend> last = last_split_->lock();
    if (last && last_split_store_ == store.get() && last_split_ranks_ == ranks) return last;
  }
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    TORCH_CHECK_VALUE(ranks[i] >= 0 && ranks[i] < getSize(), "rtd split_group: rank ", ranks[i],
                      " is not in the parent group of ", getSize(), " ranks");
    TORCH_CHECK_VALUE(i == 0 || ranks[i - 1] < ranks[i],
                      "rtd split_group: the ranks must be sorted and distinct");
  }
  const auto me = std::find(ranks.begin(), ranks.end(), getRank());
  if (me == ranks.end()) return nullptr;  // this rank is in none of the new groups
  auto made = c10::make_intrusive<BackendRTD>(store, static_cast<int>(me - ranks.begin()),
                                              static_cast<int>(ranks.size()),
                                              timeout_of(opts, timeout_), config_);
  last_split_.emplace(c10::intrusive_ptr<c10d::Backend>(made));
  last_split_store_ = store.get();
  last_split_ranks_ = ranks;
  return made;
}

c10::intrusive_ptr<c10d::Backend> BackendRTD::shrink(const std::vector<int64_t>& ranks_to_exclude,
                                                     int shrink_flags,
                                                     const c10::intrusive_ptr<Options>& opts) {
  TORCH_CHECK_VALUE(!ranks_to_exclude.empty(), "rtd shrink_group: no rank to exclude");
  std::vector<bool> out(getSize(), false);
  for (int64_t r : ranks_to_exclude) {
    TORCH_CHECK_VALUE(r >= 0 && r < getSize(), "rtd shrink_group: rank ", r,
                      " is not in the group of ", getSize(), " ranks");
    TORCH_CHECK_VALUE(r != getRank(), "rtd shrink_group: rank ", r,
                      " excludes itself (an excluded rank does not call shrink_group)");
    out[r] = true;
  }
  // SHRINK_ABORT: what is in flight on this group (waiting on the lost
  // ranks, most often) fails now rather than at its timeout.
  if (shrink_flags & 1) abort();
  int rank = 0, size = 0;
  std::string name = "shrink/";
  for (int r = 0; r < getSize(); ++r) {
    if (out[r]) {
      name += std::to_string(r) + ",";
      continue;
    }
    if (r == getRank()) rank = size;
    ++size;
  }
  std::lock_guard<std::mutex> lock(groups_mu_);
  // Every remaining rank shrinks this group the same number of times: the
  // count and the excluded ranks name the new group's keys alike on each.
  name += "/" + std::to_string(++shrinks_) + "/";
  auto store = c10::make_intrusive<c10d::PrefixStore>(name, store_);
  return c10::make_intrusive<BackendRTD>(store, rank, size, timeout_of(opts, timeout_), config_);
}

}  // namespace rtd_torch
