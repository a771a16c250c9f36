// BackendRTD: the rtd backend of torch.distributed, a c10d::Backend over
// librt_dist's communicators (through its C interface): Gloo for host
// tensors, NCCL for GPU tensors, one communicator of each made at the first
// call that needs it. Any thread may call it: calls into librt_dist are
// serialized here (librt_dist takes one caller per communicator).
//
// Operations librt_dist has no call for are built from the ones it has:
// reductions of small integer dtypes in int32, PRODUCT and bitwise ones by
// an all-gather and a local reduction, moves of odd byte counts through a
// padded buffer, gather, scatter, all-to-all with splits and uneven
// all-gathers by grouped sends and receives.
#pragma once

#include <torch/headeronly/version.h>

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <vector>

#include "comm.h"
#include "work.h"

// torch 2.15's c10d::Backend has gather_single (torch.distributed.gather_single,
// a flat output on the root); the torch releases before it, back to 2.11, do
// not (2.12 to 2.14 are not built against here: they keep c10d's default).
#define RTD_TORCH_HAS_GATHER_SINGLE \
  (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 15))

namespace rtd_torch {

// A group's settings: rt_dist.torch reads them (RTD_TORCH_COPY_ENGINES,
// RTD_TORCH_STREAM_PRIORITY, in rt_dist/_config.py) and passes them here; the
// extension reads no environment variable.
struct BackendConfig {
  // NCCL's all-reduces of sums and averages within one host by copy engines.
  bool copy_engines = false;
  // The NCCL communicator's stream at the device's highest priority, or at
  // the default one (ProcessGroupNCCL's).
  bool high_priority_stream = true;
};

// A group's options as torch.distributed copies them (split_group deep-copies
// the parent's): the timeout, with the name and description torch sets.
struct OptionsRTD : c10d::Backend::Options {
  explicit OptionsRTD(std::chrono::milliseconds timeout) : Options("rtd", timeout) {}
};

class BackendRTD : public c10d::Backend {
 public:
  BackendRTD(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
             std::chrono::milliseconds timeout, BackendConfig config);
  ~BackendRTD() override;

  const std::string getBackendName() const override { return "rtd"; }
  void setTimeout(std::chrono::milliseconds timeout) override;
  void abort() override;
  void shutdown() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
#if RTD_TORCH_HAS_GATHER_SINGLE
  // torch.distributed.gather_single (gather_into_tensor): every rank's input
  // into one tensor on the root, read as size() inputs one after the other.
  c10::intrusive_ptr<c10d::Work> gather_single(at::Tensor& output, at::Tensor& input,
                                               const c10d::GatherOptions& opts) override;
#endif
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // Sends and receives between the two are queued, then launched as one
  // group (batch_isend_irecv: a pair of ranks that each receive before they
  // send would otherwise wait on each other on the GPU). Collectives in
  // between run at once; endCoalescing's Work covers them too.
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  // New groups from this one (backend_groups.cc): split_group's, and
  // shrink_group's without the excluded ranks (on this group's store: it
  // must outlive them, as dtrun's job store does and torch's TCPStore, in
  // rank 0's process, does not).
  c10::intrusive_ptr<Options> getBackendOptions() override;
  bool supportsSplitting() const override { return true; }
  bool supportsShrinking() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranks_to_exclude,
                                           int shrink_flags,
                                           const c10::intrusive_ptr<Options>& opts) override;
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return calls_; }

  // Operations launched (for tests).
  uint64_t calls() const { return calls_; }
  // Throws the failure of either communicator (an asynchronous NCCL error,
  // an operation past its timeout, an abort), if one failed.
  void check(const char* what);

 private:
  using Call = std::function<rtd_work*(rtd_comm* comm, void* stream)>;
  // Grouped sends and receives (an rtd_group of RTD_OP_SEND/RECV).
  struct Exchange {
    std::vector<rtd_op> ops;
    Finish finish;
  };

  c10::intrusive_ptr<c10d::Work> launch(const at::Device& device, c10d::OpType type,
                                        const char* what, Finish finish, const Call& call);
  std::shared_ptr<Comm> comm_for(const at::Device& device, const char* what);
  std::string where(const char* what) const;
  at::Device device_of(const std::vector<at::Tensor>& tensors, const char* what) const;

  // Reduces t in place; `last` (if any) runs after the reduction's own
  // finishing steps, and `outputs` are the Work's result.
  c10::intrusive_ptr<c10d::Work> all_reduce_into(const at::Tensor& t, const c10d::ReduceOp& op,
                                                 std::vector<at::Tensor> outputs,
                                                 std::function<void()> last, const char* what);
  // A sparse (COO) tensor's sum: every rank's indices and values gathered,
  // added up and coalesced here, on the calling thread.
  c10::intrusive_ptr<c10d::Work> all_reduce_sparse(at::Tensor& t, const c10d::ReduceOp& op);
  c10::intrusive_ptr<c10d::Work> reduce_by_gathering(const at::Tensor& t, const c10d::ReduceOp& op,
                                                     Finish finish, std::function<void()> last,
                                                     const char* what);
  // An all-gather of `in` into `out` (both contiguous; out: size x in's
  // bytes), staging odd byte counts.
  Call all_gather_call(const at::Tensor& in, const at::Tensor& out, Finish& finish);
  // The root's half of a gather: its own input copied into outputs[root], a
  // receive into each other output.
  void add_gather_at_root(Exchange& x, const std::vector<at::Tensor>& outputs,
                          const at::Tensor& input, int root, const char* what);
  void add_send(Exchange& x, const at::Tensor& t, int peer);
  void add_recv(Exchange& x, const at::Tensor& t, int peer);
  c10::intrusive_ptr<c10d::Work> run_exchange(const at::Device& device, c10d::OpType type,
                                              const char* what, Exchange x);
  // A send to this rank (SEND) or a receive from it (RECV): matched with
  // the other half by tag, in the order posted.
  c10::intrusive_ptr<c10d::Work> exchange_with_self(c10d::OpType type, const at::Tensor& t,
                                                    int tag);
  // c10d::Backend's uneven reduce-scatter (inputs of different sizes):
  // padded to the largest, reduced by one reduce-scatter, copied out.
  c10::intrusive_ptr<c10d::Work> reduce_scatter_uneven(at::Tensor& output,
                                                       const std::vector<at::Tensor>& inputs,
                                                       const c10d::ReduceScatterOptions& opts);
  // `last` runs after the reduction's own finishing steps; `result` is the
  // Work's result.
  c10::intrusive_ptr<c10d::Work> reduce_scatter_flat(at::Tensor& output, at::Tensor& input,
                                                     const c10d::ReduceScatterOptions& opts,
                                                     std::function<void()> last,
                                                     const at::Tensor& result, const char* what);

  std::mutex mu_;  // one caller at a time into librt_dist
  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  BackendConfig config_;
  std::shared_ptr<Comm> cpu_;
  std::shared_ptr<Comm> cuda_;
  // Halves of exchanges with this rank itself not yet matched, by tag.
  struct SelfHalf {
    at::Tensor tensor;
    c10::intrusive_ptr<LocalWork> work;
  };
  std::map<int, std::deque<SelfHalf>> self_sends_, self_recvs_;
  // Between startCoalescing and endCoalescing: the sends and receives queued.
  std::optional<Exchange> batch_;
  std::vector<c10::intrusive_ptr<c10d::Work>> batch_launched_;  // collectives meanwhile
  std::optional<at::Device> batch_device_;
  // Queues a send or receive in batch_, if one is open.
  c10::intrusive_ptr<c10d::Work> queue_in_batch(const at::Device& device, c10d::OpType type,
                                                const at::Tensor& t, int peer);
  uint64_t calls_ = 0;
  uint64_t monitored_rounds_ = 0;
  std::mutex groups_mu_;  // the groups made from this one
  // The last split (not kept alive by this one), its store (alive while it
  // is: it holds it) and ranks.
  std::optional<c10::weak_intrusive_ptr<c10d::Backend>> last_split_;
  const c10d::Store* last_split_store_ = nullptr;
  std::vector<int> last_split_ranks_;
  int shrinks_ = 0;
};

}  // namespace rtd_torch
