// rtd-plan: the memory rtd::FSDP needs for the model states on each rank,
// before any GPU is asked (FSDP::plan, the engine's own arithmetic).
//   rtd-plan --world 8 --params 7B --units 32 --param-dtype bf16
//   rtd-plan --world 4 --strategy zero2 4096x4096,4096 8*11008x4096
//   rtd-plan --world 1 --offload optimizer --params 7B --units 104 --param-dtype bf16
//   rtd-plan --world 1 --largest 8192x8192 --gpu-gib 60 --host-gib 120 --disk-gib 800
// --largest UNIT: how many such units (and parameters) the GPU, host memory
// and disk given hold, model states only, with each offload setting (nvme
// with --disk-gib only).
// A unit is a comma list of parameter sizes (a size may be a product, AxB,
// with K, M, B suffixes); N*UNIT repeats it. Exit status: 0 fine, 1 a plan
// the engine would refuse (or, with --gpu-gib, one that does not fit), 2 bad
// usage.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "rt_dist/error.h"
#include "rt_dist/fsdp.h"

namespace {

using Units = std::vector<std::vector<std::size_t>>;

[[noreturn]] void bad(const std::string& why) { throw CLI::ValidationError(why); }

// "4096", "11008x4096", "7B", "1.5M": a positive element count.
std::size_t parse_size(const std::string& text) {
  std::size_t total = 1;
  std::size_t start = 0;
  for (;;) {
    const std::size_t x = text.find('x', start);
    const std::string factor = text.substr(start, x == std::string::npos ? x : x - start);
    std::size_t used = 0;
    double value = 0;
    try {
      value = std::stod(factor, &used);
    } catch (const std::exception&) {
      bad("'" + text + "': '" + factor + "' is not a number");
    }
    double scale = 1;
    const std::string suffix = factor.substr(used);
    if (suffix == "K" || suffix == "k")
      scale = 1e3;
    else if (suffix == "M")
      scale = 1e6;
    else if (suffix == "B" || suffix == "G")
      scale = 1e9;
    else if (!suffix.empty())
      bad("'" + text + "': unknown suffix '" + suffix + "' (K, M or B)");
    const double count = value * scale;
    if (!(count >= 1) || count > 1e15 ||
        count != static_cast<double>(static_cast<std::size_t>(count)))
      bad("'" + text + "': '" + factor + "' is not a whole number of elements from 1 to 1e15");
    total *= static_cast<std::size_t>(count);
    if (total > std::size_t(1e15)) bad("'" + text + "': more than 1e15 elements");
    if (x == std::string::npos) return total;
    start = x + 1;
  }
}

// "N*a,b,c" or "a,b,c": N units (1 by default) of parameters a, b, c.
void add_units(const std::string& spec, Units& units) {
  std::size_t repeat = 1;
  std::string rest = spec;
  if (const std::size_t star = spec.find('*'); star != std::string::npos) {
    repeat = parse_size(spec.substr(0, star));
    if (repeat > 100000) bad("'" + spec + "': more than 100000 units");
    rest = spec.substr(star + 1);
  }
  std::vector<std::size_t> params;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = rest.find(',', start);
    params.push_back(
        parse_size(rest.substr(start, comma == std::string::npos ? comma : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  for (std::size_t i = 0; i < repeat; ++i) units.push_back(params);
}

bool parse_dtype(const std::string& text, rtd::DType* out) {
  if (text == "fp32" || text == "float32")
    *out = rtd::DType::kFloat32;
  else if (text == "bf16" || text == "bfloat16")
    *out = rtd::DType::kBFloat16;
  else if (text == "fp16" || text == "float16")
    *out = rtd::DType::kFloat16;
  else
    return false;
  return true;
}

// The memory each rank has: GPU, host, disk (GiB).
struct Room {
  double gpu = 0, host = 0, disk = 0;
};

// Where `units` copies of `unit` do not fit: nullptr when they do.
const char* misfit(const std::vector<std::size_t>& unit, std::size_t units, int world,
                   const rtd::FSDPOptions& o, const Room& room) {
  const rtd::FSDPMemoryPlan plan = rtd::FSDP::plan(Units(units, unit), world, o);
  if (plan.total() / 1073741824.0 >= room.gpu) return "GPU memory";
  if (plan.host_total() / 1073741824.0 >= room.host) return "host memory";
  if (plan.disk_total() > 0 && plan.disk_total() / 1073741824.0 >= room.disk) return "disk";
  return nullptr;
}

// Prints whether `bytes` of offloaded states fit `gib` ("host: fits, ..."):
// nothing when either is 0.
bool fits_in(const char* where, std::size_t bytes, double gib) {
  if (gib <= 0 || bytes == 0) return true;
  const double need = bytes / 1073741824.0;
  if (need < gib)
    std::printf("  %s: fits, %.3g GiB of %.3g left\n", where, gib - need, gib);
  else
    std::printf("  %s: DOES NOT FIT: %.3g GiB more than %.3g\n", where, need - gib, gib);
  return need < gib;
}

int print_largest(const std::vector<std::size_t>& unit, int world, rtd::FSDPOptions o,
                  const Room& room) {
  std::size_t per_unit = 0;
  for (std::size_t c : unit) per_unit += c;
  char disk[64] = "";
  if (room.disk > 0) std::snprintf(disk, sizeof(disk), " (and %.3g GiB of disk)", room.disk);
  std::printf(
      "the most units of %zu parameters whose model states fit %.3g GiB of GPU and "
      "%.3g GiB of host memory%s per rank, %s over %d ranks (activations not counted):\n",
      per_unit, room.gpu, room.host, disk, std::string(rtd::to_string(o.strategy)).c_str(), world);
  for (rtd::Offload where : {rtd::Offload::kNone, rtd::Offload::kOptimizer,
                             rtd::Offload::kParameters, rtd::Offload::kNvme}) {
    o.offload = where;
    const bool sharded =
        o.strategy == rtd::ShardStrategy::kZero3 || o.strategy == rtd::ShardStrategy::kHybrid;
    if (where == rtd::Offload::kParameters && !sharded) continue;
    if (where == rtd::Offload::kNvme && room.disk <= 0) {
      std::printf("  offload nvme      (give --disk-gib)\n");
      continue;
    }
    // The largest n that fits, by bisection (memory grows with n).
    std::size_t lo = 0, hi = 1;
    while (hi < 1000000 && !misfit(unit, hi, world, o, room)) lo = hi, hi *= 2;
    while (hi - lo > 1) {
      const std::size_t mid = lo + (hi - lo) / 2;
      (!misfit(unit, mid, world, o, room) ? lo : hi) = mid;
    }
    const char* limit = misfit(unit, lo + 1, world, o, room);
    std::printf("  offload %-9s %6zu units, %8.3gB parameters (then the %s is full)\n",
                std::string(rtd::to_string(where)).c_str(), lo, lo * per_unit / 1e9, limit);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rtd-plan: the memory rtd::FSDP holds for the model states on each rank"};
  int world = 0, group = 0, units_n = 0;
  std::string params_text, strategy = "all", param_dtype = "fp32", reduce_dtype;
  std::vector<std::string> specs;
  bool no_reshard = false, in_backward = false;
  double gpu_gib = 0, host_gib = 0, disk_gib = 0;
  std::string offload_text = "none", largest;
  app.add_option("--world", world, "ranks in the job")->required()->check(CLI::Range(1, 1 << 20));
  app.add_option("--strategy", strategy, "zero1, zero2, zero3, hybrid or all");
  app.add_option("--group", group, "hybrid: ranks per shard group (the GPUs of a node)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--params", params_text,
                 "the model's parameters (7B, 1.5M, 4096x4096), with --units");
  app.add_option("--units", units_n, "--params split into this many equal units (layers)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--param-dtype", param_dtype, "fp32, bf16 or fp16: what forward computes with");
  app.add_option("--reduce-dtype", reduce_dtype,
                 "fp32, bf16 or fp16: gradients (default: --param-dtype)");
  app.add_flag("--no-reshard", no_reshard,
               "zero3/hybrid: keep gathered parameters from forward to backward");
  app.add_flag("--update-in-backward", in_backward, "update each unit as its gradient is reduced");
  app.add_option("--gpu-gib", gpu_gib, "GPU memory: say what is left for everything else")
      ->check(CLI::PositiveNumber);
  app.add_option("--offload", offload_text,
                 "none, optimizer, params or nvme: the states kept in host memory (nvme: "
                 "in a file)");
  app.add_option("--host-gib", host_gib, "host memory per rank for the offloaded states")
      ->check(CLI::PositiveNumber);
  app.add_option("--disk-gib", disk_gib, "disk per rank for the states' file (offload nvme)")
      ->check(CLI::PositiveNumber);
  app.add_option("--largest", largest,
                 "a unit (A,B,...): the most such units that fit --gpu-gib, --host-gib (and "
                 "--disk-gib), with each offload setting");
  app.add_option("units", specs, "units: sizes A,B,... (a size may be AxB; N*UNIT repeats)");
  try {
    app.parse(argc, argv);
    rtd::FSDPOptions o;
    if (!parse_dtype(param_dtype, &o.param_dtype))
      bad("--param-dtype " + param_dtype + ": fp32, bf16 or fp16");
    if (reduce_dtype.empty())
      o.reduce_dtype = o.param_dtype;
    else if (!parse_dtype(reduce_dtype, &o.reduce_dtype))
      bad("--reduce-dtype " + reduce_dtype + ": fp32, bf16 or fp16");
    o.reshard_after_forward = !no_reshard;
    o.update_in_backward = in_backward;
    o.shard_group_size = group;
    if (!rtd::parse_offload(offload_text, &o.offload))
      bad("--offload " + offload_text + ": none, optimizer, params or nvme");
    if (!largest.empty()) {
      if (gpu_gib <= 0 || host_gib <= 0) bad("--largest needs --gpu-gib and --host-gib");
      if (!specs.empty() || !params_text.empty()) bad("--largest takes its unit alone");
      if (strategy == "all") strategy = "zero3";
      if (!rtd::parse_shard_strategy(strategy, &o.strategy))
        bad("--strategy " + strategy + ": zero1, zero2, zero3 or hybrid");
      Units one;
      add_units(largest, one);
      if (one.size() != 1) bad("--largest takes one unit (no N*)");
      return print_largest(one[0], world, o, Room{gpu_gib, host_gib, disk_gib});
    }
    Units units;
    if (!params_text.empty()) {
      if (units_n == 0) bad("--params needs --units (how many layers share them)");
      if (!specs.empty()) bad("give --params with --units, or the units, not both");
      const std::size_t total = parse_size(params_text);
      if (total < static_cast<std::size_t>(units_n)) bad("--params is fewer than --units");
      for (int u = 0; u < units_n; ++u)
        units.push_back(
            {total / units_n + (static_cast<std::size_t>(u) < total % units_n ? 1 : 0)});
    } else {
      if (units_n != 0) bad("--units goes with --params");
      for (const std::string& spec : specs) add_units(spec, units);
      if (units.empty()) bad("no units: give --params P --units U, or the units' sizes");
    }
    std::vector<rtd::ShardStrategy> strategies;
    if (strategy == "all") {
      strategies = {rtd::ShardStrategy::kZero1, rtd::ShardStrategy::kZero2,
                    rtd::ShardStrategy::kZero3};
      if (group > 0) strategies.push_back(rtd::ShardStrategy::kHybrid);
    } else {
      rtd::ShardStrategy s;
      if (!rtd::parse_shard_strategy(strategy, &s))
        bad("--strategy " + strategy + ": zero1, zero2, zero3, hybrid or all");
      if (s == rtd::ShardStrategy::kHybrid && group == 0)
        bad("--strategy hybrid needs --group: the ranks of a shard group (a node's GPUs)");
      strategies = {s};
    }
    std::size_t params = 0;
    for (const auto& unit : units)
      for (std::size_t c : unit) params += c;
    std::vector<rtd::FSDPMemoryPlan> plans;  // all first: a refusal prints no table
    for (rtd::ShardStrategy s : strategies) {
      o.strategy = s;
      plans.push_back(rtd::FSDP::plan(units, world, o));
    }
    std::printf("%zu parameters in %zu units, %d ranks, %s parameters, %s gradients\n", params,
                units.size(), world, std::string(rtd::to_string(o.param_dtype)).c_str(),
                std::string(rtd::to_string(o.reduce_dtype)).c_str());
    bool fits = true;
    for (std::size_t k = 0; k < plans.size(); ++k) {
      std::printf("\n%s, per rank:\n%s", std::string(rtd::to_string(strategies[k])).c_str(),
                  plans[k].table().c_str());
      if (gpu_gib > 0) {
        const double need = plans[k].total() / 1073741824.0;
        if (need < gpu_gib)
          std::printf("  fits: %.3g GiB of %.3g left for activations, the CUDA context and NCCL\n",
                      gpu_gib - need, gpu_gib);
        else
          std::printf("  DOES NOT FIT: %.3g GiB more than the GPU's %.3g GiB\n", need - gpu_gib,
                      gpu_gib);
        fits = fits && need < gpu_gib;
      }
      fits = fits_in("host", plans[k].host_total(), host_gib) && fits;
      fits = fits_in("disk", plans[k].disk_total(), disk_gib) && fits;
    }
    return fits ? 0 : 1;
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints the help, or the error
    return rc == 0 ? 0 : 2;
  } catch (const rtd::Error& e) {
    std::fprintf(stderr, "rtd-plan: %s\n", e.what());
    return 1;
  }
}
