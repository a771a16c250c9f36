// FSDP::plan: the engine's allocations for the model states, item by item,
// without building it (rt_dist/fsdp.h [Memory plan]). Mirrors
// FSDP::Impl::setup's allocations; tests/multiproc/fsdp_test.cc holds every
// strategy and option to state_bytes() == plan total + scratch. And the
// plan's check against a GPU's free memory (fsdp_plan.h).
#include "sharding/fsdp_plan.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "collectives/device_memory.h"
#include "rt_dist/error.h"
#include "runtime/core/log.h"
#include "sharding/checkpoint/files.h"
#include "sharding/host_optimizer.h"
#include "sharding/rank_agreement.h"
#include "sharding/shard_layout.h"

namespace rtd {
namespace {

std::string size_text(std::size_t bytes) {
  char text[32];
  if (bytes >= (std::size_t(1) << 30))
    std::snprintf(text, sizeof(text), "%.2f GiB", bytes / 1073741824.0);
  else if (bytes >= (std::size_t(1) << 20))
    std::snprintf(text, sizeof(text), "%.1f MiB", bytes / 1048576.0);
  else if (bytes >= 1024)
    std::snprintf(text, sizeof(text), "%.1f KiB", bytes / 1024.0);
  else
    std::snprintf(text, sizeof(text), "%zu B", bytes);
  return text;
}

}  // namespace

namespace {
using Place = FSDPMemoryPlan::Item::Place;

std::size_t sum_of(const std::vector<FSDPMemoryPlan::Item>& items, Place where) {
  std::size_t sum = 0;
  for (const auto& i : items) sum += i.where == where ? i.bytes : 0;
  return sum;
}
}  // namespace

std::size_t FSDPMemoryPlan::total() const { return sum_of(items, Place::kDevice); }
std::size_t FSDPMemoryPlan::host_total() const { return sum_of(items, Place::kHost); }
std::size_t FSDPMemoryPlan::disk_total() const { return sum_of(items, Place::kDisk); }

std::string FSDPMemoryPlan::table() const {
  std::ostringstream out;
  std::size_t width = 5;
  for (const Item& i : items) width = std::max(width, i.what.size());
  auto lines = [&](Place where) {
    for (const Item& i : items)
      if (i.where == where)
        out << "  " << i.what << std::string(width - i.what.size() + 2, ' ') << size_text(i.bytes)
            << "\n";
  };
  lines(Place::kDevice);
  out << "  total" << std::string(width - 5 + 2, ' ') << size_text(total()) << " per rank ("
      << "sharded over " << shard_ranks << (shard_ranks == 1 ? " rank)\n" : " ranks)\n");
  const std::pair<Place, const char*> others[] = {{Place::kHost, "in host memory (offload):\n"},
                                                  {Place::kDisk, "in a file (offload nvme):\n"}};
  for (const auto& [where, title] : others) {
    const std::size_t sum = sum_of(items, where);
    if (sum == 0) continue;
    out << title;
    lines(where);
    out << "  total" << std::string(width - 5 + 2, ' ') << size_text(sum) << " per rank\n";
  }
  return out.str();
}

FSDPMemoryPlan FSDP::plan(const std::vector<std::vector<std::size_t>>& unit_counts, int world_size,
                          const FSDPOptions& o) {
  auto refuse = [](const std::string& why) {
    throw Error(ErrorCategory::kInvalidArgument, "FSDP::plan: " + why);
  };
  if (world_size < 1) refuse("world_size must be at least 1");
  if (unit_counts.empty()) refuse("no units");
  for (const auto& unit : unit_counts) {
    if (unit.empty()) refuse("a unit without parameters");
    for (std::size_t c : unit)
      if (c == 0) refuse("an empty parameter");
  }
  if (!is_float_type(o.param_dtype) || !is_float_type(o.reduce_dtype))
    refuse("param_dtype and reduce_dtype must be float32, bfloat16 or float16");
  if (o.update_in_backward && (o.max_grad_norm > 0.0f || o.loss_scale.dynamic))
    refuse("update_in_backward needs max_grad_norm = 0 and no dynamic loss scaling");
  int group = world_size;
  if (o.strategy == ShardStrategy::kHybrid && o.shard_group_size > 0) group = o.shard_group_size;
  if (group > world_size || world_size % group != 0)
    refuse("hybrid shard groups of " + std::to_string(group) + " ranks do not divide " +
           std::to_string(world_size) + " ranks");

  std::vector<UnitLayout> layouts;
  std::size_t total_shard = 0, largest_shard = 0, largest = 0, all_padded = 0;
  for (const auto& counts : unit_counts) {
    layouts.push_back(layout_unit(counts, group));
    total_shard += layouts.back().shard;
    largest_shard = std::max(largest_shard, layouts.back().shard);
    largest = std::max(largest, layouts.back().padded);
    all_padded += layouts.back().padded;
  }
  const std::size_t units = layouts.size(), two = std::min<std::size_t>(units, 2);
  const std::size_t param = dtype_size(o.param_dtype), reduce = dtype_size(o.reduce_dtype);
  const bool shards_params =
      o.strategy == ShardStrategy::kZero3 || o.strategy == ShardStrategy::kHybrid;
  const bool offload = o.offload != Offload::kNone;
  const bool params_on_host = o.offload == Offload::kParameters;
  if (params_on_host && !shards_params) refuse("offloading the parameters needs zero3 or hybrid");
  if (o.delayed_update &&
      (!offloads_optimizer(o.offload) || !o.update_in_backward || !shards_params))
    refuse(
        "delayed_update needs offload = optimizer or nvme, update_in_backward and zero3 or hybrid");

  FSDPMemoryPlan plan;
  plan.shard_ranks = group;
  auto add = [&](std::string what, std::size_t bytes, Place where = Place::kDevice) {
    plan.items.push_back({std::move(what), bytes, where});
  };
  const Place host = Place::kHost;
  const std::string param_name(to_string(o.param_dtype));
  if (offload) {  // as HostOptimizer allocates them
    const std::size_t slots = host_slots(units);
    const std::string in_flight = " in flight (" + std::to_string(slots) + " pinned slots)";
    if (o.offload == Offload::kNvme) {
      std::vector<std::size_t> shards;
      for (const UnitLayout& l : layouts) shards.push_back(l.shard);
      add("fp32 master shards and AdamW moments", StateFile::file_bytes(shards), Place::kDisk);
      add("fp32 states, a window of " + std::to_string(std::min<std::size_t>(units, kStateWindow)) +
              " units",
          StateFile::window_bytes(shards, kStateWindow), host);
    } else {
      add("fp32 master shards", total_shard * 4, host);
      add("AdamW moments (2 x fp32)", 2 * total_shard * 4, host);
    }
    if (o.update_in_backward) {
      add("reduced gradient shards" + in_flight, slots * largest_shard * reduce, host);
    } else {
      add("reduced gradient shards (pinned)", total_shard * reduce, host);
      add("gradient staging (2 x pinned)", 2 * largest_shard * reduce, host);
    }
    if (params_on_host)
      add(param_name + " parameter shards (pinned)", total_shard * param, host);
    else
      add(param_name + " parameter shards" + in_flight, slots * largest_shard * param, host);
  } else {
    add("fp32 master shards", total_shard * 4);
    add("AdamW moments (2 x fp32)", 2 * total_shard * 4);
  }
  if (o.update_in_backward || offload)
    add("reduced gradient shards (" + std::to_string(two) + " slots)",
        two * largest_shard * reduce);
  else
    add("reduced gradient shards", total_shard * reduce);
  add("loss-scale and norm scalar", 4);
  if (shards_params) {
    if (params_on_host)
      add(param_name + " shards copied in (" + std::to_string(two) + " slots)",
          two * largest_shard * param);
    else if (o.param_dtype != DType::kFloat32 || offload)
      add(param_name + " parameter shards", total_shard * param);
    if (o.delayed_update)
      add(param_name + " parameter shards, the other step's (delayed update)", total_shard * param);
    const std::size_t slots = o.reshard_after_forward ? two : units;
    add("gathered parameters (" + std::to_string(slots) + " of " + std::to_string(units) +
            " units)",
        slots * largest * param);
  } else {
    add("full parameters (every unit)", all_padded * param);
  }
  if (o.strategy == ShardStrategy::kZero1)
    add("full gradients (every unit)", all_padded * reduce);
  else
    add("gradients in full (" + std::to_string(two) + " of " + std::to_string(units) + " units)",
        two * largest * reduce);
  return plan;
}

void check_plan_fits(Store& store, const std::string& key, int rank, int size,
                     const FSDPMemoryPlan& plan, int device_index, const std::string& disk_dir) {
  std::string problem;
  if (device_index >= 0) {
    const std::size_t need = plan.total(), free = gpu::free_bytes(device_index);
    if (need > free) {
      problem = "GPU " + std::to_string(device_index) + " has " + size_text(free) +
                " free, the model states need " + size_text(need);
    } else if (need > free / 10 * 9) {
      log::get("fsdp")->warn(
          "FSDP: the model states take {} of GPU {}'s {} free: little is left for activations",
          size_text(need), device_index, size_text(free));
    }
  }
  // The host's memory and disk hold the offloaded states of every rank on it.
  const bool offloaded = plan.host_total() + plan.disk_total() > 0;
  const int local = offloaded ? ranks_on_this_host(store, key + "host/", rank, size) : 1;
  const std::string ranks =
      local == 1 ? "" : " (for the " + std::to_string(local) + " ranks on this host)";
  const std::size_t host_need = plan.host_total() * local, available = host_available_bytes();
  if (host_need > 0 && available > 0 && host_need > available) {
    problem += (problem.empty() ? "" : "; ") + std::string("the host has ") + size_text(available) +
               " of memory available, the offloaded states need " + size_text(host_need) + ranks;
  }
  const std::size_t disk_need = plan.disk_total() * local;
  const std::uint64_t disk_free = disk_need > 0 ? ckpt::free_bytes(disk_dir) : 0;
  if (disk_need > 0 && disk_free > 0 && disk_need > disk_free) {
    problem += (problem.empty() ? "" : "; ") + disk_dir + " has " + size_text(disk_free) +
               " free, the states' files need " + size_text(disk_need) + ranks;
  }
  check_every_rank_can(store, key + "can/", rank, size, problem,
                       "FSDP: the model states do not fit",
                       "shard more (ZeRO-3, or more ranks), compute in bfloat16, update in "
                       "backward, or offload to host memory or a disk; rtd-plan prints what each "
                       "choice needs",
                       ErrorCategory::kConfig);
}

std::size_t host_available_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof(line), f))
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
  std::fclose(f);
  return static_cast<std::size_t>(kib) * 1024;
}

}  // namespace rtd
