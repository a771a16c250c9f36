// rtd::init(): configuration, logging, store and default communicator, in that order.
#include "rt_dist/context.h"

#include <mutex>
#include <thread>
#include <vector>

#include "collectives/factory.h"
#include "rt_dist/error.h"
#include "runtime/core/config.h"
#include "runtime/core/log.h"
#include "runtime/core/store/grpc_store.h"
#include "runtime/env.h"
#include "runtime/mpi_store.h"
#include "runtime/slurm_store.h"

namespace rtd {
namespace {

// The store a rank of the job hosts, under mpirun or srun alone (at most one),
// and under dtrun the store itself, unprefixed (a worker that moves to the
// next round in process takes that round's prefix on it).
struct StoreHosts {
  std::unique_ptr<MpiStoreHost> mpi;
  std::unique_ptr<SlurmStoreHost> slurm;
  std::shared_ptr<Store> dtrun_root;
};

// The default communicator's namespace in the store: generation 0's is the
// one it always had.
std::string comm_prefix(int generation) {
  return generation == 0 ? "comm/default" : "gen" + std::to_string(generation) + "/comm/default";
}

class ContextImpl : public Context {
 public:
  ContextImpl(WorldInfo world, StoreHosts hosts, std::shared_ptr<Store> store,
              CommunicatorOptions comm_options, const Config& config)
      : world_(std::move(world)),
        hosts_(std::move(hosts)),
        store_(std::move(store)),
        comm_options_(std::move(comm_options)),
        timeout_(config.timeout),
        generation_(config.generation),
        recovery_(config.recovery == "in-process"),
        recovery_wait_(config.recovery_wait),
        round_(config.round),
        joining_(config.recovery_join) {
    reopen_comm(generation_);
  }

  const WorldInfo& world() const override { return world_; }
  Communicator& comm() override {
    if (!comm_)
      throw Error(ErrorCategory::kInvalidArgument,
                  "the default communicator is closed (in-process recovery): reopen_comm() first");
    return *comm_;
  }
  Store& store() override { return *store_; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  void close_comm() override {
    std::shared_ptr<Communicator> closing;
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      closing = std::move(comm_);
    }
    if (!closing) return;
    closing->abort();
    if (closing->backend() == "gloo") {
      // The abort failed every Work, but Gloo's thread may stay inside the
      // operation it ran until Gloo's own timeout (a peer lost mid-ring), and
      // the destructor waits for it: a thread of its own does, so that
      // neither the recovery nor the process's exit waits for Gloo.
      std::thread([c = std::move(closing)]() mutable { c.reset(); }).detach();
      return;
    }
    // Waits for what is in flight and closes the connections (or, where
    // abort_comm() still holds it, that thread does so when it lets go).
    closing.reset();
  }
  void reopen_comm(int generation) override {
    close_comm();
    CommunicatorOptions o = comm_options_;
    o.store = make_prefix_store(comm_prefix(generation), store_);
    std::shared_ptr<Communicator> opened = make_communicator(o);
    std::lock_guard<std::mutex> lock(comm_mu_);
    comm_ = std::move(opened);
    generation_ = generation;
  }
  void abort_comm(int round, int generation) override {
    // Aborted outside the lock (an abort may wait on the backend's own
    // locks), on a reference of its own, and only the communicator the
    // caller meant: not one a recovery built since.
    std::shared_ptr<Communicator> target;
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      if (round_ == round && generation_ == generation) target = comm_;
    }
    if (target) target->abort();
  }
  int generation() const override { return generation_; }
  void relocate(const Placement& next) override {
    if (!hosts_.dtrun_root)
      throw Error(ErrorCategory::kInvalidArgument,
                  "only a worker of dtrun moves to another round in process");
    close_comm();
    world_.rank = next.rank;
    world_.world_size = next.world_size;
    world_.node_rank = next.node_rank;
    comm_options_.rank = next.rank;
    comm_options_.size = next.world_size;
    // What the trainer built on the old store keeps a valid reference.
    retired_.push_back(store_);
    store_ = make_prefix_store("round" + std::to_string(next.round), hosts_.dtrun_root);
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      round_ = next.round;
    }
    reopen_comm(0);
  }
  bool recovery_enabled() const override { return recovery_; }
  int round() const override { return round_; }
  bool joining() const override { return joining_; }
  std::chrono::milliseconds recovery_wait() const override { return recovery_wait_; }

 private:
  WorldInfo world_;
  StoreHosts hosts_;  // declared before comm_: outlives the communicator
  std::shared_ptr<Store> store_;
  std::vector<std::shared_ptr<Store>> retired_;  // the stores of rounds moved out of
  CommunicatorOptions comm_options_;             // its store set per generation
  // comm_, generation_ and round_ as abort_comm() reads them from another thread.
  std::mutex comm_mu_;
  std::shared_ptr<Communicator> comm_;
  std::chrono::milliseconds timeout_;
  int generation_;
  bool recovery_;
  std::chrono::milliseconds recovery_wait_;
  int round_;
  bool joining_;
};

// The job's store: dtrun's; under mpirun or srun alone, one that rank 0
// hosts (*hosts keeps it); in a world of one, memory.
std::shared_ptr<Store> connect_store(const Config& config, const WorldInfo& world,
                                     StoreHosts* hosts) {
  if (world.world_size == 1) return make_memory_store();
  if (world.launcher == "dtrun") {
    hosts->dtrun_root = make_grpc_store(config.store_addr, config.token, "", config.tls);
    return make_prefix_store("round" + std::to_string(config.round), hosts->dtrun_root);
  }
  if (world.launcher == "mpirun") {
    hosts->mpi = std::make_unique<MpiStoreHost>(world, data_host(config, world));
    return hosts->mpi->store();
  }
  if (world.launcher == "slurm") {
    hosts->slurm = std::make_unique<SlurmStoreHost>(world, config);
    return hosts->slurm->store();
  }
  throw Error(ErrorCategory::kConfig,
              "a world of " + std::to_string(world.world_size) + " under " + world.launcher +
                  " needs a store that librt_dist can reach; launch the job with dtrun "
                  "(dtrun --nproc-per-node=N ./train), mpirun or srun");
}

// LOCAL_RANK's GPU; more workers than GPUs on a node is a configuration error.
int choose_device(const WorldInfo& world) {
  std::string why;
  int gpus = usable_gpu_count(&why);
  if (gpus == 0) throw Error(ErrorCategory::kConfig, "the NCCL backend needs a GPU: " + why);
  if (world.local_world_size > gpus) {
    throw Error(ErrorCategory::kConfig,
                std::to_string(world.local_world_size) + " workers on this node but " +
                    std::to_string(gpus) + " GPUs visible; use --nproc-per-node=" +
                    std::to_string(gpus) + " or fewer, or RTD_BACKEND=gloo");
  }
  return world.local_rank;
}

}  // namespace

std::shared_ptr<Context> init(const InitOptions& options) {
  Config config = Config::from_env(read_process_env());
  WorldInfo world = detect_world(config);
  log::setup("rank " + std::to_string(world.rank) + "/local " + std::to_string(world.local_rank),
             config.log_spec);
  auto logger = log::get("runtime");
  logger->info("init: rank {} of {} (local {} of {}, node {}) under {}", world.rank,
               world.world_size, world.local_rank, world.local_world_size, world.node_rank,
               world.launcher);
  logger->debug("config: store='{}' round={} addr='{}' timeout={}s backend={}", config.store_addr,
                config.round, config.node_addr, config.timeout.count() / 1000, config.backend);

  const auto started = std::chrono::steady_clock::now();
  StoreHosts hosts;
  auto store = connect_store(config, world, &hosts);
  const auto store_ready = std::chrono::steady_clock::now();
  std::string backend = choose_backend(config, options, world);
  CommunicatorOptions comm_options = communicator_defaults(config, options.nccl);
  comm_options.backend = backend;
  comm_options.rank = world.rank;
  comm_options.size = world.world_size;
  comm_options.host = data_host(config, world);
  comm_options.device = backend == "nccl" ? choose_device(world) : 0;
  if (backend == "mpi" && world.world_size > 1 && world.launcher != "mpirun")
    throw Error(ErrorCategory::kConfig,
                "RTD_BACKEND=mpi needs a job started by mpirun (its ranks are MPI's); this one "
                "was started by " +
                    world.launcher + ": use RTD_BACKEND=gloo, or start it with mpirun -np N");
  if (config.generation > 0)
    logger->info("init: a replacement worker, in generation {} (in-process recovery)",
                 config.generation);
  auto ctx = std::make_shared<ContextImpl>(std::move(world), std::move(hosts), std::move(store),
                                           std::move(comm_options), config);
  // Where the start-up goes (bench/startup_time.sh reads this line).
  auto ms = [](auto from, auto to) {
    return std::chrono::duration<double, std::milli>(to - from).count();
  };
  const auto done = std::chrono::steady_clock::now();
  logger->info("init: ready in {:.0f} ms: the store {:.0f} ms, the {} communicator {:.0f} ms",
               ms(started, done), ms(started, store_ready), backend, ms(store_ready, done));
  return ctx;
}

}  // namespace rtd
