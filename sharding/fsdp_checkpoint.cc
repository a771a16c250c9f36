// rtd::FSDP's checkpoint state: what each rank's shard space holds, named
// for the checkpointer, and how a loaded state is put back (docs/sharding.md).
#include "rt_dist/error.h"
#include "sharding/fsdp_impl.h"

namespace rtd {

ckpt::State FSDP::checkpoint_state(const std::vector<std::vector<ckpt::Tensor>>& params,
                                   bool for_save) {
  Impl& s = *impl_;
  if (s.host) s.host->wait_steps();  // delayed_update: the last step's may still run
  if (static_cast<int>(params.size()) != s.unit_count())
    throw Error(ErrorCategory::kInvalidArgument,
                "FSDP::checkpoint_state: names for " + std::to_string(params.size()) +
                    " units, but the engine has " + std::to_string(s.unit_count()));
  const bool saves = !for_save || !s.replica_comm || s.replica_comm->rank() == 0;
  ckpt::State state;
  const char* suffix[] = {"", ".exp_avg", ".exp_avg_sq"};
  // With offload, the states are the host's.
  const DeviceType where = s.host ? DeviceType::kCpu : s.device;
  auto base = [&](int k, int u) {  // unit u's array k: master, first and second moments
    if (s.host) return s.host->state(k, u);
    const DeviceBuffer* arrays[] = {s.master.get(), s.m.get(), s.v.get()};
    return static_cast<float*>(arrays[k]->data()) + s.shard_off[u];
  };
  for (int u = 0; u < s.unit_count(); ++u) {
    const UnitLayout& l = s.layouts[u];
    if (params[u].size() != l.counts.size())
      throw Error(ErrorCategory::kInvalidArgument,
                  "FSDP::checkpoint_state: unit " + std::to_string(u) + " has " +
                      std::to_string(l.counts.size()) + " parameters, " +
                      std::to_string(params[u].size()) + " names given");
    for (std::size_t i = 0; i < l.counts.size(); ++i) {
      std::size_t n = 1;
      for (std::int64_t d : params[u][i].shape) n *= static_cast<std::size_t>(d);
      if (n != l.counts[i])
        throw Error(ErrorCategory::kInvalidArgument,
                    "FSDP::checkpoint_state: '" + params[u][i].name + "' has " +
                        std::to_string(l.counts[i]) + " elements, its shape says " +
                        std::to_string(n));
    }
    for (int k = 0; k < 3; ++k) {
      std::vector<std::size_t> index(l.counts.size());
      for (std::size_t i = 0; i < l.counts.size(); ++i) {
        index[i] = state.tensors.size();
        state.tensors.push_back(
            ckpt::Tensor{params[u][i].name + suffix[k], DType::kFloat32, params[u][i].shape, {}});
      }
      if (!saves) continue;
      float* array = base(k, u);
      for (const ShardPiece& piece : pieces_in_shard(l, s.group_rank())) {
        if (piece.count == 0) continue;
        state.tensors[index[piece.param]].ranges.push_back(ckpt::Range{
            piece.param_first, piece.count, array + piece.shard_offset, where, s.device_index});
      }
    }
  }
  state.meta["fsdp.steps"] = std::to_string(s.steps);
  state.meta["fsdp.loss_scale"] = std::to_string(s.scale);
  state.meta["fsdp.good_steps"] = std::to_string(s.good_steps);
  return state;
}

void FSDP::after_load(const ckpt::State& loaded, StreamRef stream) {
  Impl& s = *impl_;
  // A gather still in flight (the next step's prefetch) carries the old values.
  for (auto& w : s.gather_work) {
    if (w) w->wait();
    w = nullptr;
  }
  auto number = [&](const char* key, double fallback) {
    auto it = loaded.meta.find(key);
    return it == loaded.meta.end() ? fallback : std::stod(it->second);
  };
  s.steps = static_cast<int>(number("fsdp.steps", s.steps));
  s.scale = static_cast<float>(number("fsdp.loss_scale", s.scale));
  s.good_steps = static_cast<int>(number("fsdp.good_steps", s.good_steps));
  for (int u = 0; u < s.unit_count(); ++u) {
    const UnitLayout& l = s.layouts[u];
    if (s.host) s.publish(u);
    if (s.shards_params()) {
      if (s.compute_shard && !s.host)
        cast_async(s.shard_of(*s.master, DType::kFloat32, u),
                   s.shard_of(*s.compute_shard, s.o.param_dtype, u), stream);
      s.param_slots->release(u);  // gathered again, from the loaded shards
      continue;
    }
    // ZeRO-1/2: the shard into its place in the full parameters, gathered in place.
    BufferView own = s.at(*s.full_params[u], s.o.param_dtype, l.shard * s.group_rank(), l.shard);
    if (!s.host) cast_async(s.shard_of(*s.master, DType::kFloat32, u), own, stream);
    s.gather_work[u] =
        s.gatherer->run(own, s.at(*s.full_params[u], s.o.param_dtype, 0, l.padded), stream);
  }
}

}  // namespace rtd
