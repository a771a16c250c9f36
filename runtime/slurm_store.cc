// SlurmStoreHost: rank 0's StoreServer at an address derived from srun's variables.
#include "runtime/slurm_store.h"

#include <thread>

#include "rt_dist/error.h"
#include "runtime/core/log.h"
#include "runtime/core/slurm.h"
#include "runtime/leave_store.h"

namespace rtd {
namespace {

constexpr const char* kUpKey = "slurm/up";
constexpr const char* kLeavingKey = "slurm/leaving";
constexpr std::chrono::seconds kLeaveWait{30};

}  // namespace

SlurmStoreHost::SlurmStoreHost(const WorldInfo& world, const Config& config) : world_(world) {
  const std::string host = !config.master_addr.empty() ? config.master_addr
                           : config.slurm_nodelist.empty()
                               ? "127.0.0.1"
                               : slurm::first_host(config.slurm_nodelist);
  const int port = config.master_port ? *config.master_port
                                      : slurm::default_port(config.slurm_job_id.value_or(0),
                                                            config.slurm_step_id.value_or(0));
  const std::string token = !config.token.empty()
                                ? config.token
                                : "slurm-" + std::to_string(config.slurm_job_id.value_or(0)) + "." +
                                      std::to_string(config.slurm_step_id.value_or(0));
  const std::string address = host + ":" + std::to_string(port);
  if (world.rank == 0) {
    const bool one_host = world.local_world_size == world.world_size;
    try {
      server_ = std::make_unique<StoreServer>(one_host ? "127.0.0.1" : "0.0.0.0", port, token);
    } catch (const Error& e) {
      throw Error(ErrorCategory::kConfig,
                  std::string("rank 0 could not host the job's store under srun: ") + e.what() +
                      "; set MASTER_PORT to a free port");
    }
  }
  store_ = make_grpc_store(address, token);
  if (world.rank == 0) {
    store_->set(kUpKey, "1");
    log::get("runtime")->info("rank 0 hosts the job's store at {} (srun)", address);
    return;
  }
  // Rank 0 may not listen yet: ask until it answers, within the timeout.
  const auto give_up = std::chrono::steady_clock::now() + config.timeout;
  std::string last_error = "it did not say it was up";
  for (;;) {
    try {
      if (store_->check({kUpKey})) return;
    } catch (const Error& e) {
      last_error = e.what();
    }
    if (std::chrono::steady_clock::now() >= give_up) {
      throw Error(ErrorCategory::kTimeout,
                  "rank 0's store at " + address + " did not answer within " +
                      std::to_string(config.timeout.count() / 1000) + " s (RTD_TIMEOUT_S): " +
                      last_error + "; check that rank 0 started and that " + host +
                      " is its address (MASTER_ADDR overrides it)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

SlurmStoreHost::~SlurmStoreHost() {
  leave_store(*store_, server_ != nullptr, world_.world_size, kLeavingKey, kLeaveWait);
  store_.reset();
  server_.reset();
}

}  // namespace rtd
