// MpiCommunicator: collectives on Open MPI (RTD_BACKEND=mpi, under mpirun),
// so that a job launched the HPC way moves its bytes the way Open MPI does
// on that cluster (shared memory on a host; UCX over InfiniBand, RoCE or TCP
// between hosts). Each communicator is its own duplicate of MPI_COMM_WORLD
// (or a split of one); operations are validated on the caller's thread and
// posted in order on a queue thread as MPI's non-blocking calls (MPI_I*),
// whose completion that thread tests, so that Work::wait, the timeout and
// abort() behave as on Gloo, and the flight recorder names a rank that never
// called. MPI has no 16-bit float types: bfloat16 and float16 are reduced in
// float32 (widened, reduced, rounded once, as Gloo does) and moved as bytes.
// Device buffers go to Open MPI as they are where it is CUDA-aware
// (MPIX_Query_cuda_support); elsewhere they are refused, naming the fix.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "collectives/cpu_work.h"
#include "collectives/flight_recorder.h"
#include "collectives/op_queue.h"
#include "rt_dist/communicator.h"
#include "rt_dist/store.h"

namespace rtd::mpi {

class MpiSession;

struct MpiOptions {
  std::shared_ptr<Store> store;  // scoped to this communicator: the flight recorder's
  std::string name = "default";  // in messages
  int rank = 0;                  // must be this process's rank in MPI_COMM_WORLD
  int size = 1;
  std::chrono::milliseconds timeout{300'000};
  FlightOptions flight;
};

class MpiCommunicator : public Communicator {
 public:
  // Collective over MPI_COMM_WORLD (MPI_Comm_dup). Throws rtd::Error(kConfig)
  // where MPI's world is not the job's (not started by mpirun) or MPI's
  // thread support is too low.
  explicit MpiCommunicator(const MpiOptions& options);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  using Communicator::all_reduce;
  std::shared_ptr<Work> all_reduce(BufferView in, BufferView out, ReduceOp op,
                                   StreamRef stream) override;
  std::shared_ptr<Work> broadcast(BufferView buf, int root, StreamRef stream) override;
  std::shared_ptr<Work> all_gather(BufferView in, BufferView out, StreamRef stream) override;
  std::shared_ptr<Work> reduce_scatter(BufferView in, BufferView out, ReduceOp op,
                                       StreamRef stream) override;
  std::shared_ptr<Work> all_to_all(BufferView in, BufferView out, StreamRef stream) override;
  std::shared_ptr<Work> barrier(StreamRef stream) override;
  std::shared_ptr<Work> send(BufferView buf, int peer, int tag, StreamRef stream) override;
  std::shared_ptr<Work> recv(BufferView buf, int peer, int tag, StreamRef stream) override;
  std::shared_ptr<Work> group(const std::function<void()>& body) override;
  std::unique_ptr<Communicator> split(int color, int key) override;
  void abort() override;

  // One operation's MPI calls, run on the queue thread (mpi_communicator.cc).
  struct Task;

 private:
  MpiCommunicator(const MpiOptions& options, void* comm);  // a split's: takes comm
  void check_session();
  // Where the buffers live: host, or device where Open MPI is CUDA-aware
  // (MPI then reads them once the caller's stream reached the call). Throws otherwise.
  DeviceType placement(const char* op, const BufferView& buf, StreamRef stream);
  std::shared_ptr<Work> enqueue(const char* op, std::uint64_t call, DeviceType where,
                                std::shared_ptr<Task> task, StreamRef stream);
  // On the queue thread: posts the tasks' requests together, tests them to
  // completion (or the timeout, or an abort), then finishes them.
  void run_tasks(const std::string& what, const std::vector<std::shared_ptr<Task>>& tasks,
                 CpuWork& work);
  std::shared_ptr<Work> point_to_point(bool is_send, BufferView buf, int peer, int tag,
                                       StreamRef stream);
  std::uint64_t record(const CallDescription& call) {
    return recorder_->record(call.op, call.args);
  }

  std::shared_ptr<MpiSession> session_;
  MpiOptions options_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  void* comm_ = nullptr;  // MPI_Comm
  std::atomic<bool> aborted_{false};
  std::atomic<bool> broken_{false};  // an operation timed out: MPI still owns its buffers
  std::uint32_t next_split_ = 0;
  // Inside group(): the tasks posted together, then waited as one Work.
  struct GroupState {
    std::vector<std::shared_ptr<Task>> tasks;
    std::shared_ptr<CpuWork> work;
    bool device = false;
  };
  std::unique_ptr<GroupState> group_;
  std::unique_ptr<FlightRecorder> recorder_;
  OpQueue queue_;  // last: its thread stops before what it uses goes
};

}  // namespace rtd::mpi
