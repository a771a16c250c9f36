// MpiSession: MPI initialized for librt_dist (unless the trainer did it), and
// finalized when the last user lets go: the job's store bootstrapped under
// mpirun (runtime/mpi_store.h) and the MPI communicators. Entry points:
// mpi_api.h.
#pragma once

#include <memory>
#include <string>

namespace rtd::mpi {

class MpiSession {
 public:
  // The process's session: loads Open MPI and initializes it (asking for
  // MPI_THREAD_MULTIPLE) unless that was done. Throws rtd::Error(kConfig)
  // naming what is missing, or rtd::Error(kBackend) when MPI_Init_thread fails.
  static std::shared_ptr<MpiSession> shared();
  // MPI_Finalize, when this session initialized MPI.
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  // Rank `root`'s value on every rank of MPI_COMM_WORLD (collective).
  std::string broadcast(const std::string& value, int root);
  // The thread support MPI gave (MPI_THREAD_*); below MPI_THREAD_SERIALIZED
  // librt_dist's own threads cannot call MPI.
  int thread_level() const { return thread_level_; }
  // Whether this Open MPI takes device (CUDA) buffers (MPIX_Query_cuda_support).
  bool cuda_aware() const;

 private:
  MpiSession(bool finalize, int thread_level);
  bool finalize_ = false;
  int thread_level_ = 0;
};

}  // namespace rtd::mpi
