// MpiSession: the few Open MPI entry points librt_dist uses, found at run time
// (dlopen of libmpi), so that nothing links MPI and a process that dtrun
// started never loads it. Today: bootstrapping the job's store under mpirun.
#pragma once

#include <memory>
#include <string>

namespace rtd::mpi {

class MpiSession {
 public:
  // Loads Open MPI and initializes it unless the trainer already did. Throws
  // rtd::Error(kConfig) naming what is missing (the library, an entry point)
  // or rtd::Error(kBackend) when MPI_Init fails.
  static std::unique_ptr<MpiSession> open();
  // MPI_Finalize, when open() initialized MPI.
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  // Rank `root`'s value on every rank of MPI_COMM_WORLD (collective).
  std::string broadcast(const std::string& value, int root);

  struct Api;  // the entry points (mpi_session.cc)

 private:
  MpiSession(std::unique_ptr<Api> api, bool finalize);
  std::unique_ptr<Api> api_;
  bool finalize_ = false;
};

}  // namespace rtd::mpi
