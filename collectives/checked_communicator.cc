// CheckedCommunicator: one store exchange per collective, compared on every rank.
#include "collectives/checked_communicator.h"

#include "collectives/flight_recorder.h"
#include "rt_dist/error.h"

namespace rtd {

CheckedCommunicator::CheckedCommunicator(std::unique_ptr<Communicator> inner,
                                         std::shared_ptr<Store> store,
                                         std::chrono::milliseconds timeout)
    : inner_(std::move(inner)), store_(std::move(store)), timeout_(timeout) {}

void CheckedCommunicator::check(const CallDescription& what) { check(what.op, what.args.text()); }

void CheckedCommunicator::check(const char* op, const std::string& args) {
  const std::uint64_t seq = ++seq_;
  const std::string call = std::string(op) + " (" + args + ")";
  const std::string prefix = "check/" + std::to_string(seq) + "/";
  store_->set(prefix + std::to_string(rank()), call);
  std::vector<std::string> calls(size());
  bool agree = true;
  for (int r = 0; r < size(); ++r) {
    try {
      calls[r] = r == rank() ? call : store_->get(prefix + std::to_string(r), timeout_);
    } catch (const Error& e) {
      throw Error(e.category(), "collective check #" + std::to_string(seq) + " on rank " +
                                    std::to_string(rank()) + ", " + call + ": rank " +
                                    std::to_string(r) + " did not make a collective call #" +
                                    std::to_string(seq) + " (" + e.what() + ")");
    }
    agree = agree && calls[r] == call;
  }
  // Every rank has written this call, so every rank has read the previous one.
  if (seq > 1) store_->remove("check/" + std::to_string(seq - 1) + "/" + std::to_string(rank()));
  if (agree) return;
  std::string message = "collective #" + std::to_string(seq) +
                        ": ranks disagree on the collective they call (nothing was launched):";
  for (int r = 0; r < size(); ++r) message += " rank " + std::to_string(r) + " " + calls[r] + ";";
  message.pop_back();
  throw Error(ErrorCategory::kInvalidArgument, message);
}

std::shared_ptr<Work> CheckedCommunicator::all_reduce(BufferView in, BufferView out, ReduceOp op,
                                                      StreamRef stream) {
  check(describe::all_reduce(in, op));
  return inner_->all_reduce(in, out, op, stream);
}

std::shared_ptr<Work> CheckedCommunicator::broadcast(BufferView buf, int root, StreamRef stream) {
  check(describe::broadcast(buf, root));
  return inner_->broadcast(buf, root, stream);
}

std::shared_ptr<Work> CheckedCommunicator::all_gather(BufferView in, BufferView out,
                                                      StreamRef stream) {
  check(describe::all_gather(in));
  return inner_->all_gather(in, out, stream);
}

std::shared_ptr<Work> CheckedCommunicator::reduce_scatter(BufferView in, BufferView out,
                                                          ReduceOp op, StreamRef stream) {
  check(describe::reduce_scatter(out, op));
  return inner_->reduce_scatter(in, out, op, stream);
}

std::shared_ptr<Work> CheckedCommunicator::all_to_all(BufferView in, BufferView out,
                                                      StreamRef stream) {
  check(describe::all_to_all(in));
  return inner_->all_to_all(in, out, stream);
}

std::shared_ptr<Work> CheckedCommunicator::barrier(StreamRef stream) {
  check(describe::barrier());
  return inner_->barrier(stream);
}

std::unique_ptr<Communicator> CheckedCommunicator::split(int color, int key) {
  check("split", "");
  const int n = splits_++;
  auto child = inner_->split(color, key);
  if (!child) return nullptr;
  return std::make_unique<CheckedCommunicator>(
      std::move(child),
      make_prefix_store("split" + std::to_string(n) + "/color" + std::to_string(color), store_),
      timeout_);
}

namespace {
std::string buffers_args(const std::vector<BufferView>& buffers) {
  std::string args = std::to_string(buffers.size()) + " buffers";
  for (const BufferView& b : buffers) args += ", " + call_args(b);
  return args;
}
}  // namespace

std::unique_ptr<PersistentAllReduce> CheckedCommunicator::persistent_all_reduce(
    std::vector<BufferView> buffers, ReduceOp op, PersistentOptions options) {
  check("persistent_all_reduce", buffers_args(buffers) + ", " + std::string(to_string(op)));
  return inner_->persistent_all_reduce(std::move(buffers), op, options);
}

std::unique_ptr<PersistentShardCollective> CheckedCommunicator::persistent_all_gather(
    std::vector<BufferView> sources, PersistentOptions options) {
  check("persistent_all_gather", buffers_args(sources));
  return inner_->persistent_all_gather(std::move(sources), options);
}

std::unique_ptr<PersistentShardCollective> CheckedCommunicator::persistent_reduce_scatter(
    std::vector<BufferView> sources, ReduceOp op, PersistentOptions options) {
  check("persistent_reduce_scatter", buffers_args(sources) + ", " + std::string(to_string(op)));
  return inner_->persistent_reduce_scatter(std::move(sources), op, options);
}

}  // namespace rtd
