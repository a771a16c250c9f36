// Flag parsing for the benchmarks (plain loop: these are tools, not the launcher).
#include "bench/common/bench_options.h"

#include <sstream>
#include <stdexcept>

namespace rtd::bench {
namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::size_t parse_size(const std::string& flag, const std::string& text) {
  std::size_t used = 0;
  double value = std::stod(text, &used);
  std::string unit = text.substr(used);
  std::size_t scale = 1;
  if (unit == "K" || unit == "KB")
    scale = 1 << 10;
  else if (unit == "M" || unit == "MB")
    scale = 1 << 20;
  else if (unit == "G" || unit == "GB")
    scale = std::size_t{1} << 30;
  else if (!unit.empty())
    throw std::invalid_argument(flag + ": unknown unit '" + unit + "'");
  return static_cast<std::size_t>(value * scale);
}

DType parse_dtype(const std::string& name) {
  for (DType d :
       {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kBFloat16}) {
    if (to_string(d) == name) return d;
  }
  throw std::invalid_argument("--dtypes: unknown dtype '" + name + "'");
}

}  // namespace

std::string bench_usage() {
  return "flags: --mode ours|raw|paired|gloo|mpi  --ops "
         "all_reduce,reduce_scatter,all_gather,broadcast,all_to_all\n"
         "       --min-bytes 1K --max-bytes 1G --factor 2 --dtypes float32,bfloat16\n"
         "       --warmup 5 --iters 20 --blocks 5 --no-check --json FILE --label TEXT\n"
         "       --startup (time the start-up to the first all-reduce instead)\n"
         "       --sample-host FILE (rank 0's host call stacks while the last variant runs)\n"
         "       --sample-variant NAME (sample that variant instead: raw, raw_end, ...)\n"
         "       --sample-clock cpu|wall (the sampling timer: the thread's CPU time, at most\n"
         "         the kernel's tick rate, or elapsed time at the full rate; default cpu)\n"
         "       --raw-init plain|thread|ours (raw NCCL's communicator made on this thread,\n"
         "         with a config on a thread of its own as ours is, or none: raw calls on\n"
         "         our communicator's own NCCL handle; default plain)\n"
         "       --host-delay-ns N (paired: a row raw_delay, raw_end_drv and N ns of host\n"
         "         time that touch no memory; default 0, no such row)";
}

BenchOptions parse_bench_options(int argc, char** argv) {
  BenchOptions o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--no-check") {
      o.check = false;
      continue;
    }
    if (flag == "--startup") {
      o.startup = true;
      continue;
    }
    if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
    std::string v = argv[++i];
    if (flag == "--mode")
      o.mode = v;
    else if (flag == "--ops")
      o.ops = split(v);
    else if (flag == "--min-bytes")
      o.min_bytes = parse_size(flag, v);
    else if (flag == "--max-bytes")
      o.max_bytes = parse_size(flag, v);
    else if (flag == "--factor")
      o.factor = std::stoul(v);
    else if (flag == "--warmup")
      o.warmup = std::stoi(v);
    else if (flag == "--iters")
      o.iters = std::stoi(v);
    else if (flag == "--blocks")
      o.blocks = std::stoi(v);
    else if (flag == "--json")
      o.json = v;
    else if (flag == "--label")
      o.label = v;
    else if (flag == "--sample-host")
      o.sample_host = v;
    else if (flag == "--sample-variant")
      o.sample_variant = v;
    else if (flag == "--sample-clock") {
      if (v != "cpu" && v != "wall") throw std::invalid_argument("--sample-clock: cpu or wall");
      o.sample_wall = v == "wall";
    } else if (flag == "--raw-init") {
      o.raw_init = v;
    } else if (flag == "--host-delay-ns") {
      o.host_delay_ns = std::stoll(v);
      if (o.host_delay_ns < 0 || o.host_delay_ns > 1'000'000)
        throw std::invalid_argument("--host-delay-ns: 0 to 1000000");
    } else if (flag == "--dtypes") {
      o.dtypes.clear();
      for (const auto& name : split(v)) o.dtypes.push_back(parse_dtype(name));
    } else {
      throw std::invalid_argument("unknown flag " + flag);
    }
  }
  if (o.raw_init != "plain" && o.raw_init != "thread" && o.raw_init != "ours") {
    throw std::invalid_argument("--raw-init must be plain, thread or ours");
  }
  if (o.mode != "ours" && o.mode != "raw" && o.mode != "paired" && o.mode != "gloo" &&
      o.mode != "mpi") {
    throw std::invalid_argument("--mode must be ours, raw, paired, gloo or mpi");
  }
  if (o.factor < 2 || o.iters < 1 || o.blocks < 1 || o.min_bytes < 1 || o.max_bytes < o.min_bytes) {
    throw std::invalid_argument("need --factor >= 2, --iters >= 1, --blocks >= 1, 1 <= min <= max");
  }
  return o;
}

}  // namespace rtd::bench
