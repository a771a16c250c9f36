// MpiCommunicator: MPI's non-blocking collectives posted and tested on a
// queue thread (mpi_communicator.h).
#include "collectives/mpi/mpi_communicator.h"

#include <climits>
#include <cstring>
#include <thread>

#include "collectives/device_memory.h"
#include "collectives/half_floats.h"
#include "collectives/mpi/mpi_api.h"
#include "collectives/mpi/mpi_session.h"
#include "collectives/validate.h"
#include "rt_dist/error.h"

namespace rtd::mpi {

struct MpiCommunicator::Task {
  // Posts the operation's requests (MPI_I*) into reqs; throws rtd::Error.
  std::function<void(const MpiApi&, void* comm, std::vector<void*>& reqs)> post;
  // Runs once they completed: a widened result narrowed, an average scaled.
  std::function<void()> finish;
  std::uint64_t call = 0;  // in the flight recorder (0: point-to-point)
  // Device buffers: the caller's stream must reach this before MPI reads them.
  std::shared_ptr<gpu::StreamPoint> ready;
};

namespace {

using Task = MpiCommunicator::Task;
using Clock = std::chrono::steady_clock;

// The largest tag MPI guarantees (MPI_TAG_UB is at least this everywhere).
constexpr int kMaxTag = 32767;

void posted(const MpiApi& api, int rc, const char* call) {
  if (rc != 0) throw Error(ErrorCategory::kBackend, "MPI: " + api.describe(rc, call), rc);
}

int count_of(const char* op, std::size_t n) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw Error(ErrorCategory::kInvalidArgument,
                std::string(op) + ": " + std::to_string(n) +
                    " elements (or bytes) in one MPI call, more than MPI's int count takes; "
                    "split the buffer");
  return static_cast<int>(n);
}

bool is_half(DType t) { return t == DType::kBFloat16 || t == DType::kFloat16; }

// The MPI datatype of a dtype MPI reduces itself (not the 16-bit floats).
void* mpi_type(const MpiApi& api, DType t) {
  switch (t) {
    case DType::kFloat32:
      return api.f32;
    case DType::kFloat64:
      return api.f64;
    case DType::kInt32:
      return api.i32;
    case DType::kInt64:
      return api.i64;
    default:
      return api.f32;  // 16-bit floats are reduced widened to float32
  }
}

void* mpi_op(const MpiApi& api, ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin:
      return api.op_min;
    case ReduceOp::kMax:
      return api.op_max;
    default:
      return api.op_sum;  // avg is a sum, scaled after
  }
}

template <typename T>
void scale(void* data, std::size_t count, int size) {
  auto* p = static_cast<T*>(data);
  for (std::size_t i = 0; i < count; ++i) p[i] /= static_cast<T>(size);
}

// out /= size where the op is an average (float types; validate refuses the rest).
void average(const BufferView& out, ReduceOp op, int size) {
  if (op != ReduceOp::kAvg) return;
  if (out.dtype == DType::kFloat64) return scale<double>(out.data, out.count, size);
  scale<float>(out.data, out.count, size);
}

// The Work of an operation on device buffers: what a stream waits for is
// the host's (MPI completes on the host).
class HostCompletedWork : public Work {
 public:
  explicit HostCompletedWork(std::shared_ptr<Work> inner) : inner_(std::move(inner)) {}
  bool done() const override { return inner_->done(); }
  void wait() override { inner_->wait(); }
  void wait(std::chrono::milliseconds timeout) override { inner_->wait(timeout); }
  void wait(StreamRef) override { inner_->wait(); }
  std::optional<Error> error() const override { return inner_->error(); }

 private:
  std::shared_ptr<Work> inner_;
};

}  // namespace

MpiCommunicator::MpiCommunicator(const MpiOptions& options)
    : session_(MpiSession::shared()),
      options_(options),
      rank_(options.rank),
      size_(options.size),
      timeout_(options.timeout) {
  check_session();
  const MpiApi& api = mpi_api();
  int world_rank = -1, world_size = 0;
  {
    MpiCallLock lock;
    posted(api, api.comm_rank(api.comm_world, &world_rank), "MPI_Comm_rank");
    posted(api, api.comm_size(api.comm_world, &world_size), "MPI_Comm_size");
  }
  if (world_rank != rank_ || world_size != size_)
    throw Error(ErrorCategory::kConfig,
                "the MPI backend needs the job's ranks to be MPI's: this is rank " +
                    std::to_string(rank_) + " of " + std::to_string(size_) +
                    ", MPI's world says rank " + std::to_string(world_rank) + " of " +
                    std::to_string(world_size) +
                    "; start the job with mpirun -np N (or use RTD_BACKEND=gloo under dtrun)");
  {
    MpiCallLock lock;
    posted(api, api.comm_dup(api.comm_world, &comm_), "MPI_Comm_dup");
    posted(api, api.comm_set_errhandler(comm_, api.errors_return), "MPI_Comm_set_errhandler");
  }
  recorder_ = std::make_unique<FlightRecorder>(
      options_.store, rank_, size_, FlightRecorder::publish_interval(size_), options_.flight);
}

MpiCommunicator::MpiCommunicator(const MpiOptions& options, void* comm)
    : session_(MpiSession::shared()),
      options_(options),
      rank_(options.rank),
      size_(options.size),
      timeout_(options.timeout),
      comm_(comm) {
  const MpiApi& api = mpi_api();
  {
    MpiCallLock lock;
    posted(api, api.comm_set_errhandler(comm_, api.errors_return), "MPI_Comm_set_errhandler");
  }
  recorder_ = std::make_unique<FlightRecorder>(
      options_.store, rank_, size_, FlightRecorder::publish_interval(size_), options_.flight);
}

MpiCommunicator::~MpiCommunicator() {
  queue_.post([this] {
    // With a request still in MPI's hands (a timeout, an abort), freeing
    // the communicator could wait on it: it is left to MPI_Finalize.
    if (comm_ == nullptr || broken_ || aborted_) return;
    MpiCallLock lock;
    mpi_api().comm_free(&comm_);
  });
}

void MpiCommunicator::check_session() {
  if (session_->thread_level() < kThreadSerialized)
    throw Error(ErrorCategory::kConfig,
                "the MPI backend calls MPI from its own thread, but MPI was initialized with "
                "thread support " +
                    std::to_string(session_->thread_level()) +
                    " (below MPI_THREAD_SERIALIZED); initialize it with "
                    "MPI_Init_thread(MPI_THREAD_MULTIPLE), or let librt_dist do it");
}

DeviceType MpiCommunicator::placement(const char* op, const BufferView& buf, StreamRef stream) {
  if (buf.device != DeviceType::kCuda) return DeviceType::kCpu;
  if (!session_->cuda_aware())
    throw Error(ErrorCategory::kInvalidArgument,
                std::string(op) +
                    ": a device buffer, but this Open MPI is not CUDA-aware "
                    "(MPIX_Query_cuda_support() is not 1); use RTD_BACKEND=nccl for GPU "
                    "buffers, or an Open MPI built with CUDA (and UCX's cuda transports)");
  return DeviceType::kCuda;
}

void MpiCommunicator::run_tasks(const std::string& what,
                                const std::vector<std::shared_ptr<Task>>& tasks, CpuWork& work) {
  const MpiApi& api = mpi_api();
  std::vector<void*> reqs;
  auto mark_done = [&] {
    for (const auto& t : tasks)
      if (t->call != 0) recorder_->completed(t->call);
  };
  try {
    if (aborted_) throw Error(ErrorCategory::kBackend, what + ": communicator was aborted");
    if (broken_)
      throw Error(ErrorCategory::kBackend,
                  what +
                      ": an earlier operation of this communicator timed out or was "
                      "aborted; it cannot be used any more");
    const auto deadline = Clock::now() + timeout_;
    // MPI reads device buffers as the caller's stream leaves them.
    for (const auto& t : tasks) {
      while (t->ready && !t->ready->reached()) {
        if (aborted_) throw Error(ErrorCategory::kBackend, what + ": communicator was aborted");
        if (Clock::now() >= deadline)
          throw Error(ErrorCategory::kTimeout,
                      what + ": the caller's stream did not reach the operation within " +
                          std::to_string(timeout_.count()) + " ms");
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
    {
      MpiCallLock lock;
      for (const auto& t : tasks) t->post(api, comm_, reqs);
    }
    int idle = 0;
    for (std::size_t left = reqs.size(); left > 0;) {
      bool progressed = false;
      for (void*& req : reqs) {
        if (req == nullptr) continue;
        int flag = 0;
        {
          MpiCallLock lock;
          posted(api, api.test(&req, &flag, nullptr), "MPI_Test");
        }
        if (flag) {
          req = nullptr;
          --left;
          progressed = true;
        }
      }
      if (left == 0) break;
      if (aborted_) {
        broken_ = true;  // MPI cannot cancel a collective: its buffers stay MPI's
        throw Error(ErrorCategory::kBackend, what + ": communicator was aborted");
      }
      if (Clock::now() >= deadline) {
        broken_ = true;
        const std::uint64_t call = tasks.front()->call;
        const std::string why = call == 0 ? std::string() : recorder_->diagnose(call);
        throw Error(ErrorCategory::kTimeout, what + " did not complete within " +
                                                 std::to_string(timeout_.count()) +
                                                 " ms (a peer may have failed or not called it)" +
                                                 (why.empty() ? "" : "; " + why));
      }
      // Keep testing, as MPI_Wait would: Open MPI's non-blocking collectives
      // (libnbc) advance their rounds only inside MPI_Test, so a thread that
      // sleeps between tests stretches every round of a large one. After a
      // short spin it yields the core to any thread that needs it.
      idle = progressed ? 0 : idle + 1;
      if (idle > 200) std::this_thread::yield();
    }
    for (const auto& t : tasks)
      if (t->finish) t->finish();
    mark_done();
    work.complete();
  } catch (const Error& e) {
    mark_done();
    work.fail(e);
  } catch (const std::exception& e) {
    mark_done();
    work.fail(Error(ErrorCategory::kInternal, what + ": " + e.what()));
  }
}

std::shared_ptr<Work> MpiCommunicator::enqueue(const char* op, std::uint64_t call, DeviceType where,
                                               std::shared_ptr<Task> task, StreamRef stream) {
  task->call = call;
  if (where == DeviceType::kCuda) task->ready = std::make_shared<gpu::StreamPoint>(stream);
  if (group_) {
    group_->tasks.push_back(std::move(task));
    group_->device = group_->device || where == DeviceType::kCuda;
    return group_->work;
  }
  const std::string what = std::string("mpi ") + op +
                           (call != 0 ? " #" + std::to_string(call) : std::string()) + " on rank " +
                           std::to_string(rank_);
  auto work = std::make_shared<CpuWork>(what, timeout_ + std::chrono::seconds(5));
  queue_.post([this, what, task, work] { run_tasks(what, {task}, *work); });
  if (where == DeviceType::kCuda) return std::make_shared<HostCompletedWork>(work);
  return work;
}

// Averages and 16-bit floats are finished on the host (a division, a
// widening): device buffers of them are refused before anything else, on any
// Open MPI (an average once divided through the device pointer on the host).
void refuse_host_only_reduction(const char* op, const BufferView& in, ReduceOp reduce) {
  if (in.device == DeviceType::kCuda && (is_half(in.dtype) || reduce == ReduceOp::kAvg))
    throw Error(ErrorCategory::kInvalidArgument,
                std::string(op) +
                    ": the MPI backend reduces bfloat16, float16 and averages on the host only; "
                    "use RTD_BACKEND=nccl for device buffers of them (or sum, then divide)");
}

std::shared_ptr<Work> MpiCommunicator::all_reduce(BufferView in, BufferView out, ReduceOp op,
                                                  StreamRef stream) {
  refuse_host_only_reduction("all_reduce", in, op);
  const DeviceType where = placement("all_reduce", in, stream);
  validate::all_reduce(in, out, op, where);
  count_of("all_reduce", in.count);
  auto task = std::make_shared<Task>();
  const int size = size_;
  if (is_half(in.dtype)) {
    // Widened when it runs (an earlier operation may still write `in`).
    auto wide = std::make_shared<std::vector<float>>();
    task->post = [in, op, wide](const MpiApi& api, void* comm, std::vector<void*>& reqs) {
      *wide = widen(in);
      reqs.emplace_back();
      posted(api,
             api.iallreduce(kInPlace, wide->data(), static_cast<int>(wide->size()), api.f32,
                            mpi_op(api, op), comm, &reqs.back()),
             "MPI_Iallreduce");
    };
    task->finish = [out, op, wide, size] {
      average(view(wide->data(), wide->size()), op, size);
      narrow(*wide, out);
    };
  } else {
    task->post = [in, out, op](const MpiApi& api, void* comm, std::vector<void*>& reqs) {
      reqs.emplace_back();
      posted(api,
             api.iallreduce(in.data == out.data ? kInPlace : in.data, out.data,
                            static_cast<int>(in.count), mpi_type(api, in.dtype), mpi_op(api, op),
                            comm, &reqs.back()),
             "MPI_Iallreduce");
    };
    task->finish = [out, op, size] { average(out, op, size); };
  }
  return enqueue("all_reduce", record(describe::all_reduce(in, op)), where, task, stream);
}

std::shared_ptr<Work> MpiCommunicator::broadcast(BufferView buf, int root, StreamRef stream) {
  const DeviceType where = placement("broadcast", buf, stream);
  validate::broadcast(buf, root, size_, where);
  const int bytes = count_of("broadcast", buf.bytes());
  auto task = std::make_shared<Task>();
  task->post = [buf, root, bytes](const MpiApi& api, void* comm, std::vector<void*>& reqs) {
    reqs.emplace_back();
    posted(api, api.ibcast(buf.data, bytes, api.byte, root, comm, &reqs.back()), "MPI_Ibcast");
  };
  return enqueue("broadcast", record(describe::broadcast(buf, root)), where, task, stream);
}

std::shared_ptr<Work> MpiCommunicator::all_gather(BufferView in, BufferView out, StreamRef stream) {
  const DeviceType where = placement("all_gather", in, stream);
  validate::all_gather(in, out, size_, where);
  const int bytes = count_of("all_gather", in.bytes());
  const bool in_place = static_cast<char*>(out.data) + rank_ * in.bytes() == in.data;
  auto task = std::make_shared<Task>();
  task->post = [in, out, bytes, in_place](const MpiApi& api, void* comm, std::vector<void*>& reqs) {
    reqs.emplace_back();
    posted(api,
           api.iallgather(in_place ? kInPlace : in.data, bytes, api.byte, out.data, bytes, api.byte,
                          comm, &reqs.back()),
           "MPI_Iallgather");
  };
  return enqueue("all_gather", record(describe::all_gather(in)), where, task, stream);
}

std::shared_ptr<Work> MpiCommunicator::reduce_scatter(BufferView in, BufferView out, ReduceOp op,
                                                      StreamRef stream) {
  refuse_host_only_reduction("reduce_scatter", in, op);
  const DeviceType where = placement("reduce_scatter", in, stream);
  validate::reduce_scatter(in, out, op, size_, where);
  count_of("reduce_scatter", in.count);
  const int size = size_;
  auto task = std::make_shared<Task>();
  // The result lands apart from the input (which it may overlap), then in out.
  auto wide_in = std::make_shared<std::vector<float>>();
  auto result = std::make_shared<std::vector<char>>();
  task->post = [in, out, op, wide_in, result](const MpiApi& api, void* comm,
                                              std::vector<void*>& reqs) {
    const bool half = is_half(in.dtype);
    if (half) *wide_in = widen(in);
    result->resize(out.count * (half ? sizeof(float) : dtype_size(out.dtype)));
    reqs.emplace_back();
    posted(api,
           api.ireduce_scatter_block(half ? static_cast<const void*>(wide_in->data()) : in.data,
                                     result->data(), static_cast<int>(out.count),
                                     mpi_type(api, in.dtype), mpi_op(api, op), comm, &reqs.back()),
           "MPI_Ireduce_scatter_block");
  };
  task->finish = [out, op, result, size] {
    if (is_half(out.dtype)) {
      std::vector<float> wide(out.count);
      std::memcpy(wide.data(), result->data(), wide.size() * sizeof(float));
      average(view(wide.data(), wide.size()), op, size);
      narrow(wide, out);
      return;
    }
    if (out.device == DeviceType::kCuda) {
      gpu::copy_from_host(result->data(), out.data, out.bytes(), out.device_index);
      return;
    }
    std::memcpy(out.data, result->data(), out.bytes());
    average(out, op, size);
  };
  return enqueue("reduce_scatter", record(describe::reduce_scatter(out, op)), where, task, stream);
}

std::shared_ptr<Work> MpiCommunicator::all_to_all(BufferView in, BufferView out, StreamRef stream) {
  const DeviceType where = placement("all_to_all", in, stream);
  validate::all_to_all(in, out, size_, where);
  const int block = count_of("all_to_all", in.bytes() / static_cast<std::size_t>(size_));
  auto task = std::make_shared<Task>();
  task->post = [in, out, block](const MpiApi& api, void* comm, std::vector<void*>& reqs) {
    reqs.emplace_back();
    posted(api,
           api.ialltoall(in.data, block, api.byte, out.data, block, api.byte, comm, &reqs.back()),
           "MPI_Ialltoall");
  };
  return enqueue("all_to_all", record(describe::all_to_all(in)), where, task, stream);
}

std::shared_ptr<Work> MpiCommunicator::barrier(StreamRef stream) {
  auto task = std::make_shared<Task>();
  task->post = [](const MpiApi& api, void* comm, std::vector<void*>& reqs) {
    reqs.emplace_back();
    posted(api, api.ibarrier(comm, &reqs.back()), "MPI_Ibarrier");
  };
  return enqueue("barrier", record(describe::barrier()), DeviceType::kCpu, task, stream);
}

std::shared_ptr<Work> MpiCommunicator::point_to_point(bool is_send, BufferView buf, int peer,
                                                      int tag, StreamRef stream) {
  const char* op = is_send ? "send" : "recv";
  const DeviceType where = placement(op, buf, stream);
  validate::point_to_point(op, buf, peer, rank_, size_, where);
  if (tag < 0 || tag > kMaxTag)
    throw Error(ErrorCategory::kInvalidArgument,
                std::string(op) + ": tag " + std::to_string(tag) +
                    " is outside [0, 32767], the tags MPI guarantees");
  const int bytes = count_of(op, buf.bytes());
  auto task = std::make_shared<Task>();
  task->post = [is_send, buf, peer, tag, bytes](const MpiApi& api, void* comm,
                                                std::vector<void*>& reqs) {
    reqs.emplace_back();
    if (is_send)
      posted(api, api.isend(buf.data, bytes, api.byte, peer, tag, comm, &reqs.back()), "MPI_Isend");
    else
      posted(api, api.irecv(buf.data, bytes, api.byte, peer, tag, comm, &reqs.back()), "MPI_Irecv");
  };
  return enqueue(op, 0, where, task, stream);
}

std::shared_ptr<Work> MpiCommunicator::send(BufferView buf, int peer, int tag, StreamRef stream) {
  return point_to_point(true, buf, peer, tag, stream);
}

std::shared_ptr<Work> MpiCommunicator::recv(BufferView buf, int peer, int tag, StreamRef stream) {
  return point_to_point(false, buf, peer, tag, stream);
}

std::shared_ptr<Work> MpiCommunicator::group(const std::function<void()>& body) {
  if (group_) throw Error(ErrorCategory::kInvalidArgument, "group: groups do not nest");
  const std::string what = "mpi group on rank " + std::to_string(rank_);
  group_ = std::make_unique<GroupState>();
  group_->work = std::make_shared<CpuWork>(what, timeout_ + std::chrono::seconds(5));
  try {
    body();
  } catch (...) {
    group_.reset();
    throw;
  }
  std::unique_ptr<GroupState> state = std::move(group_);
  std::shared_ptr<CpuWork> work = state->work;
  if (state->tasks.empty()) {
    work->complete();
    return work;
  }
  // Posted together: paired sends and receives cannot wait on each other.
  queue_.post([this, what, tasks = state->tasks, work] { run_tasks(what, tasks, *work); });
  if (state->device) return std::make_shared<HostCompletedWork>(work);
  return work;
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  // MPI_Comm_split is collective and blocking: run in order after what was
  // posted, on the queue thread.
  // The new handle lands in a holder the queue thread owns too: a wait that
  // times out leaves the task, and MPI, still holding it.
  auto sub = std::make_shared<void*>(nullptr);
  auto work = std::make_shared<CpuWork>("mpi split on rank " + std::to_string(rank_),
                                        timeout_ + std::chrono::seconds(5));
  queue_.post([this, color, key, sub, work] {
    const MpiApi& api = mpi_api();
    try {
      if (aborted_ || broken_)
        throw Error(ErrorCategory::kBackend, "mpi split: the communicator was aborted");
      MpiCallLock lock;
      posted(api, api.comm_split(comm_, color < 0 ? kUndefined : color, key, sub.get()),
             "MPI_Comm_split");
      work->complete();
    } catch (const Error& e) {
      work->fail(e);
    }
  });
  work->wait();
  const std::uint32_t seq = next_split_++;
  if (color < 0 || *sub == mpi_api().comm_null) return nullptr;
  int sub_rank = 0, sub_size = 0;
  {
    MpiCallLock lock;
    mpi_api().comm_rank(*sub, &sub_rank);
    mpi_api().comm_size(*sub, &sub_size);
  }
  MpiOptions o = options_;
  o.name = options_.name + "/split" + std::to_string(seq) + "/color" + std::to_string(color);
  o.store = make_prefix_store("split" + std::to_string(seq) + "/color" + std::to_string(color),
                              options_.store);
  o.rank = sub_rank;
  o.size = sub_size;
  return std::unique_ptr<Communicator>(new MpiCommunicator(o, *sub));
}

void MpiCommunicator::abort() {
  // MPI cannot cancel a collective: the operation in flight fails at once
  // and its buffers stay MPI's; every later one fails too.
  aborted_ = true;
}

}  // namespace rtd::mpi
