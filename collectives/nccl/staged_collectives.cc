#include "collectives/nccl/staged_collectives.h"

#include "rt_dist/trace.h"
#include "runtime/core/log.h"

namespace rtd::nccl {
namespace {

const char* name_of(StagedCollectives::Kind kind) {
  switch (kind) {
    case StagedCollectives::Kind::kAllReduce:
      return "all_reduce";
    case StagedCollectives::Kind::kAllGather:
      return "all_gather";
    case StagedCollectives::Kind::kReduceScatter:
      return "reduce_scatter";
  }
  return "?";
}

}  // namespace

StagedCollectives::Slot* StagedCollectives::slot_for(Kind kind, const BufferView& in, ReduceOp op,
                                                     std::size_t moved_bytes) {
  const bool reduces = kind != Kind::kAllGather;
  if (reduces && (!is_float_type(in.dtype) || (op != ReduceOp::kSum && op != ReduceOp::kAvg))) {
    return nullptr;
  }
  if (!reduces) op = ReduceOp::kSum;  // one slot whatever the caller's options say
  const int k = static_cast<int>(kind);
  if (refused_[k] || moved_bytes < kMinBytes) return nullptr;
  const auto key = std::make_tuple(k, in.count, static_cast<int>(in.dtype), static_cast<int>(op));
  if (auto it = slots_.find(key); it != slots_.end()) return it->second.get();
  // The site's own memory: the all-gather's staged shard, the others' landing area.
  const auto push_kind = kind == Kind::kAllReduce ? CopyEnginePushCollective::Kind::kAllReduce
                                                  : CopyEnginePushCollective::Kind::kReduceScatter;
  const std::size_t held = kind == Kind::kAllGather ? in.bytes()
                                                    : CopyEnginePushCollective::landing_bytes(
                                                          push_kind, in.count, in.dtype, ranks_);
  if (bytes_ + held > kMaxBytes) return nullptr;
  const SiteRule rule = rule_for(rules_, name_of(kind), in.count, SiteRule::kMeasure);
  if (rule == SiteRule::kKernels) return nullptr;  // RTD_CE_SITES: never staged
  auto slot =
      std::make_unique<Slot>(Slot{kind, nullptr, nullptr, BufferView{}, nullptr,
                                  std::string(name_of(kind)) + " of " + std::to_string(in.count) +
                                      " x " + std::string(to_string(in.dtype)),
                                  MethodChoice(rule, choice_), nullptr, -1});
  std::string why;
  if (kind == Kind::kAllGather) {
    slot->staging = std::make_unique<DeviceBuffer>(DeviceType::kCuda, device_, in.bytes());
    slot->view = BufferView{.data = slot->staging->data(),
                            .count = in.count,
                            .dtype = in.dtype,
                            .device = DeviceType::kCuda,
                            .device_index = device_};
    slot->gather = make_gather_(slot->view, &why);
  } else {
    slot->push = make_push_(push_kind, in, op, &why);
  }
  if (!slot->push && !slot->gather) {
    refused_[k] = true;
    log::get("nccl")->info("{} staged by copy engines not used: {}", name_of(kind), why);
    return nullptr;
  }
  bytes_ += held;
  log::get("nccl")->info(
      "{} staged by copy engines ({} MiB held by the sites in all; {})", slot->site, bytes_ >> 20,
      rule == SiteRule::kMeasure ? "against NCCL's kernels, measured" : "as RTD_CE_SITES says");
  return slots_.emplace(key, std::move(slot)).first->second.get();
}

void StagedCollectives::run(Slot& slot, const BufferView& in, const BufferView& out, StreamRef s) {
  if (slot.push) {
    slot.push->run(in, out, s)->wait(s);
  } else {
    cast_async(in, slot.view, s);
    slot.gather->run(slot.view, out, s)->wait(s);
  }
}

Method StagedCollectives::method_for_call(Slot& slot, const Agree& agree) {
  const MethodChoice::Step step = slot.choice.next();
  slot.timing = step.timed;
  if (step.timed >= 0 && !slot.trials) {
    slot.trials = std::make_unique<TrialEvents>(slot.choice.timed_calls());
  }
  if (!step.agree) return step.method;
  for (int i = 0; i < slot.choice.timed_calls(); ++i) {
    slot.choice.timed(i, slot.trials ? slot.trials->ms(i) : -1);
  }
  const std::int64_t start_us = trace::now_us();
  MethodChoice::Sums sums = slot.choice.local();
  agree(sums);
  std::string why;
  const Method m = slot.choice.decide(sums, &why);
  log::get("nccl")->info("{}: {}", slot.site, why);
  if (trace::enabled()) {
    trace::span("method chosen", "choice", "staged sites", start_us, trace::now_us(),
                slot.site + ": " + why);
  }
  return m;
}

void StagedCollectives::begin_call(Slot& slot, StreamRef s) {
  if (slot.timing >= 0) slot.trials->begin(slot.timing, static_cast<cudaStream_t>(s.cuda_stream));
}

void StagedCollectives::end_call(Slot& slot, StreamRef s) {
  if (slot.timing >= 0) slot.trials->end(slot.timing, static_cast<cudaStream_t>(s.cuda_stream));
}

}  // namespace rtd::nccl
