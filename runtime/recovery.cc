// In-process recovery (rt_dist/recovery.h): the generation counter dtrun
// raises in the store when it restarts a lost worker, the rebuilt
// communicator, and the state sent from a survivor.
#include "rt_dist/recovery.h"

#include <signal.h>

#include <atomic>
#include <cstdio>
#include <optional>
#include <thread>

#include "rt_dist/error.h"
#include "runtime/core/log.h"

namespace rtd {
namespace {

// Where dtrun counts the generations of a round (the workers' store prefix
// is the round's): it adds one before it starts a replacement.
constexpr const char* kGenerationKey = "recovery/generation";
constexpr std::chrono::milliseconds kPoll{50};
// How long one wait of the watch holds the store (it waits again after):
// the longest the thread takes to see that it is disarmed or must stop.
constexpr std::chrono::milliseconds kWatchSlice{1000};
std::atomic<bool> g_move_signalled{false};

std::shared_ptr<Store> generation_store(Context& ctx, int generation) {
  // A non-owning handle: the context outlives the Recovery.
  std::shared_ptr<Store> root(&ctx.store(), [](Store*) {});
  return make_prefix_store("gen" + std::to_string(generation), root);
}

}  // namespace

Recovery::Recovery(Context& ctx)
    : ctx_(ctx),
      // A replacement, a newcomer node's worker, and any worker started into
      // a later round of a job that recovers in process agree on the state
      // before their first step; the first two have none of their own.
      replacement_(ctx.generation() > 0 || (ctx.recovery_enabled() && ctx.round() > 0)),
      has_state_(ctx.generation() == 0 && !ctx.joining()),
      store_(generation_store(ctx, ctx.generation())) {}

Recovery::~Recovery() {
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    stopping_ = true;
  }
  watch_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

std::string Recovery::end_key(int generation) {
  return "recovery/end/" + std::to_string(generation);
}

void Recovery::arm() {
  if (!ctx_.recovery_enabled()) return;
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    ++epoch_;
    armed_ = true;
    watched_store_ = &ctx_.store();
    watched_generation_ = ctx_.generation();
    watched_round_ = ctx_.round();
    if (!watcher_.joinable()) watcher_ = std::thread([this] { watch(); });
  }
  watch_cv_.notify_all();
}

void Recovery::disarm() {
  std::lock_guard<std::mutex> lock(watch_mu_);
  ++epoch_;
  armed_ = false;
}

void Recovery::watch() {
  for (;;) {
    Store* store;
    int generation, round;
    std::uint64_t epoch;
    {
      std::unique_lock<std::mutex> lock(watch_mu_);
      watch_cv_.wait(lock, [this] { return stopping_ || armed_; });
      if (stopping_) return;
      store = watched_store_;
      generation = watched_generation_;
      round = watched_round_;
      epoch = epoch_;
    }
    std::string why;
    try {
      why = store->get(end_key(generation), kWatchSlice);
    } catch (const Error& e) {
      // Not yet (a slice passed), or the store cannot be reached: the
      // operations fail or time out on their own then.
      if (e.category() != ErrorCategory::kTimeout) std::this_thread::sleep_for(kWatchSlice);
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(watch_mu_);
      if (stopping_) return;
      if (!armed_ || epoch_ != epoch) continue;  // recover() runs, or ran since
      armed_ = false;
    }
    // Outside the lock: recover() must never wait for an abort. The context
    // aborts only the communicator of that round and generation.
    log::get("recovery")
        ->warn("generation {} of this round ends ({}): aborting the communicator", generation, why);
    ctx_.abort_comm(round, generation);
  }
}

void Recovery::enable() {
  ctx_.store().set("recovery/capable/" + std::to_string(ctx_.rank()), "1");
  if (!enabled_) {
    // dtrun's word that this worker moves to a new round while nothing
    // failed (a node joined): SIGUSR1, noted here, read by should_move().
    struct sigaction sa {};
    sa.sa_handler = [](int) { g_move_signalled.store(true); };
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, nullptr);
  }
  enabled_ = true;
  arm();
}

bool Recovery::should_move() {
  if (!g_move_signalled.exchange(false)) return false;
  return ctx_.store().try_get("recovery/move/" + std::to_string(ctx_.rank())).has_value();
}

int Recovery::generation() const { return ctx_.generation(); }

bool Recovery::recover(const std::function<void()>& release) {
  auto logger = log::get("recovery");
  const auto start = std::chrono::steady_clock::now();
  disarm();
  try {
    ctx_.comm().abort();
  } catch (const Error&) {
    // already closed
  }
  if (release) release();
  ctx_.close_comm();
  if (!ctx_.recovery_enabled()) return false;
  // Either dtrun starts a replacement (a new generation of this round), or
  // a node was lost and this worker's dtrun moves it to the next round
  // (a record under its rank: the round, its new rank and world size).
  const int from = ctx_.generation();
  const std::string move_key = "recovery/move/" + std::to_string(ctx_.rank());
  const auto until = start + ctx_.recovery_wait();
  int next = from;
  std::optional<std::string> move;
  while ((next = static_cast<int>(ctx_.store().add(kGenerationKey, 0))) <= from &&
         !(move = ctx_.store().try_get(move_key))) {
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
  std::string what;
  if (move) {
    Context::Placement p;
    if (std::sscanf(move->c_str(), "%d %d %d %d", &p.round, &p.rank, &p.world_size, &p.node_rank) !=
            4 ||
        p.rank < 0 || p.world_size < 1 || p.rank >= p.world_size)
      throw Error(ErrorCategory::kInternal,
                  "in-process recovery: a malformed move '" + *move + "' for this rank");
    what = "moved to round " + std::to_string(p.round) + " as rank " + std::to_string(p.rank) +
           " of " + std::to_string(p.world_size);
    ctx_.relocate(p);
  } else {
    what = "generation " + std::to_string(next);
    ctx_.reopen_comm(next);
  }
  store_ = generation_store(ctx_, ctx_.generation());
  if (enabled_) enable();  // in the new round's store too; the watch armed again
  logger->info(
      "{}: communicator rebuilt ({:.0f} ms to close and learn where, {:.0f} ms to rebuild)", what,
      std::chrono::duration<double, std::milli>(closed - start).count(),
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
