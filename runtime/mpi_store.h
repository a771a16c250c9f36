// MpiStoreHost: the job's store for a job that mpirun started (no dtrun):
// rank 0 hosts a StoreServer, tells every rank where it is and the token it
// wants through one MPI broadcast, and every rank connects to it. On
// destruction every rank says it is leaving and rank 0 keeps the server up
// until all have (or 30 s passed), so that no rank loses the store while it
// still tears its communicators down.
#pragma once

#include <memory>
#include <string>

#include "collectives/mpi/mpi_session.h"
#include "rt_dist/context.h"
#include "rt_dist/store.h"
#include "runtime/core/store/store_server.h"

namespace rtd {

class MpiStoreHost {
 public:
  // host: the address other ranks reach this one at (rank 0's is advertised).
  MpiStoreHost(const WorldInfo& world, const std::string& host);
  ~MpiStoreHost();
  MpiStoreHost(const MpiStoreHost&) = delete;
  MpiStoreHost& operator=(const MpiStoreHost&) = delete;

  std::shared_ptr<Store> store() const { return store_; }

 private:
  WorldInfo world_;
  std::shared_ptr<mpi::MpiSession> session_;
  std::unique_ptr<StoreServer> server_;  // rank 0 only
  std::shared_ptr<Store> store_;
};

}  // namespace rtd
