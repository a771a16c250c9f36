// In-process recovery (rt_dist/recovery.h): the generation counter dtrun
// raises in the store when it restarts a lost worker, the rebuilt
// communicator, and the state sent from a survivor.
#include "rt_dist/recovery.h"

#include <thread>

#include "rt_dist/error.h"
#include "runtime/core/log.h"

namespace rtd {
namespace {

// Where dtrun counts the generations of a round (the workers' store prefix
// is the round's): it adds one before it starts a replacement.
constexpr const char* kGenerationKey = "recovery/generation";
constexpr std::chrono::milliseconds kPoll{50};

std::shared_ptr<Store> generation_store(Context& ctx, int generation) {
  // A non-owning handle: the context outlives the Recovery.
  std::shared_ptr<Store> root(&ctx.store(), [](Store*) {});
  return make_prefix_store("gen" + std::to_string(generation), root);
}

}  // namespace

Recovery::Recovery(Context& ctx)
    : ctx_(ctx),
      replacement_(ctx.generation() > 0),
      has_state_(ctx.generation() == 0),
      store_(generation_store(ctx, ctx.generation())) {}

Recovery::~Recovery() = default;

void Recovery::enable() {
  ctx_.store().set("recovery/capable/" + std::to_string(ctx_.rank()), "1");
}

int Recovery::generation() const { return ctx_.generation(); }

bool Recovery::recover(const std::function<void()>& release) {
  auto logger = log::get("recovery");
  const auto start = std::chrono::steady_clock::now();
  try {
    ctx_.comm().abort();
  } catch (const Error&) {
    // already closed
  }
  if (release) release();
  ctx_.close_comm();
  if (!ctx_.recovery_enabled()) return false;
  const int from = ctx_.generation();
  const auto until = start + ctx_.recovery_wait();
  int next = from;
  while ((next = static_cast<int>(ctx_.store().add(kGenerationKey, 0))) <= from) {
    if (std::chrono::steady_clock::now() >= until) {
      logger->warn(
          "no replacement worker started within {} s (RTD_RECOVERY_WAIT_S): the failure "
          "is the job's",
          std::chrono::duration_cast<std::chrono::seconds>(ctx_.recovery_wait()).count());
      return false;
    }
    std::this_thread::sleep_for(kPoll);
  }
  const auto closed = std::chrono::steady_clock::now();
  ctx_.reopen_comm(next);
  store_ = generation_store(ctx_, next);
  logger->info(
      "generation {}: communicator rebuilt ({:.0f} ms to close and learn of the replacement, "
      "{:.0f} ms to rebuild)",
      next, std::chrono::duration<double, std::milli>(closed - start).count(),
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - closed).count());
  return true;
}

int Recovery::sync(const std::vector<BufferView>& state, std::int64_t* step) {
  // Who holds state, and its step, through the store: the same on every
  // backend (NCCL reduces device memory only).
  const int rank = ctx_.rank(), size = ctx_.world_size();
  store_->set("sync/" + std::to_string(rank), has_state_ ? std::to_string(*step) : "-");
  int source = -1;
  for (int r = 0; r < size && source < 0; ++r) {
    const std::string value = store_->get("sync/" + std::to_string(r), ctx_.timeout());
    if (value == "-") continue;
    source = r;
    try {
      *step = std::stoll(value);
    } catch (const std::exception&) {
      throw Error(ErrorCategory::kInternal, "in-process recovery: rank " + std::to_string(r) +
                                                " wrote a malformed step '" + value + "'");
    }
  }
  if (source < 0)
    throw Error(ErrorCategory::kInvalidArgument,
                "in-process recovery: no rank of generation " + std::to_string(generation()) +
                    " holds the state (every one is a replacement); restart from a checkpoint");
  Communicator& comm = ctx_.comm();
  for (const BufferView& b : state) comm.broadcast(b, source)->wait();
  has_state_ = true;
  log::get("recovery")->info("state of rank {} received: resuming after step {}", source, *step);
  return source;
}

}  // namespace rtd
