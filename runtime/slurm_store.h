// SlurmStoreHost: the job's store for a job that srun started alone, one task
// per GPU (no dtrun, no MPI): rank 0 hosts a StoreServer at an address every
// task knows without talking first (MASTER_ADDR, else the step's first host;
// MASTER_PORT, else slurm::default_port), the others connect once it answers.
// The token is DTRUN_TOKEN when the job sets one (srun passes the batch
// script's environment on), else one derived from the job and step ids, which
// keeps jobs apart but is no secret.
#pragma once

#include <memory>
#include <string>

#include "rt_dist/context.h"
#include "rt_dist/store.h"
#include "runtime/core/config.h"
#include "runtime/core/store/store_server.h"

namespace rtd {

class SlurmStoreHost {
 public:
  SlurmStoreHost(const WorldInfo& world, const Config& config);
  ~SlurmStoreHost();
  SlurmStoreHost(const SlurmStoreHost&) = delete;
  SlurmStoreHost& operator=(const SlurmStoreHost&) = delete;

  std::shared_ptr<Store> store() const { return store_; }

 private:
  WorldInfo world_;
  std::unique_ptr<StoreServer> server_;  // rank 0 only
  std::shared_ptr<Store> store_;
};

}  // namespace rtd
