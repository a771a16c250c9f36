// GlooCommunicator: argument checks, mesh setup, and the queueing of each
// operation; the typed Gloo calls are in gloo_ops.cc.
#include "collectives/gloo/gloo_communicator.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <mutex>
#include <vector>

#include "collectives/cpu_work.h"
#include "collectives/gloo/gloo_ops.h"
#include "collectives/gloo/gloo_store_adapter.h"
#include "collectives/gloo/pair_abort.h"
#include "collectives/group_work.h"
#include "collectives/validate.h"
#include "runtime/core/log.h"

namespace rtd::gloo_backend {
namespace {

bool contains(const std::string& text, const char* part) {
  return text.find(part) != std::string::npos;
}
bool timed_out(const std::string& message) {
  return contains(message, "Timed out") || contains(message, "timed out");
}
// A peer's end of the connection went away: it failed, timed out or exited first.
bool peer_gone(const std::string& message) {
  return contains(message, "closed by peer") || contains(message, "Connection reset");
}

Error from_gloo(const std::string& what, const ::gloo::Exception& e) {
  const std::string message = e.what();
  const char* hint = timed_out(message)   ? " (a peer may have failed or not called it)"
                     : peer_gone(message) ? " (a peer rank closed its connection: it failed, timed "
                                            "out or exited first, and its log says why)"
                                          : "";
  return Error(timed_out(message) ? ErrorCategory::kTimeout : ErrorCategory::kBackend,
               what + " failed in Gloo: " + message + hint);
}

// Gloo's TCP device must resolve the host it listens on (empty: this host's
// name); after failing to once, a second attempt in the same process crashes
// inside Gloo. So resolve it here first, and say what to do.
void check_resolvable(const std::string& host, int rank) {
  std::string name = host;
  if (name.empty()) {
    char buf[256] = {};
    gethostname(buf, sizeof(buf) - 1);
    name = buf;
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(name.c_str(), nullptr, &hints, &found);
  if (rc != 0) {
    throw Error(ErrorCategory::kConfig,
                "rank " + std::to_string(rank) + ": Gloo cannot listen on '" + name +
                    "': the name does not resolve (" + gai_strerror(rc) +
                    "); give this host an entry in /etc/hosts or DNS, or pass an address "
                    "(dtrun passes each node's)");
  }
  freeaddrinfo(found);
}

// Gloo writes to its sockets without MSG_NOSIGNAL: a peer that closes its
// connection mid-transfer (it failed, or aborted for a recovery) would kill
// this process with SIGPIPE instead of failing the operation. Ignored here,
// once, unless the program installed a handler of its own (dtrun's workers
// and Python already ignore it; a trainer under mpirun or srun may not).
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return;
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, nullptr);
    log::get("gloo")->debug("SIGPIPE ignored: a closed connection fails its operation instead");
  });
}

}  // namespace

GlooCommunicator::GlooCommunicator(const GlooOptions& options)
    : rank_(options.rank), size_(options.size), timeout_(options.timeout) {
  options_ = options;
  validate::rank_in_range("gloo init", "rank", rank_, size_);
  check_resolvable(options.host, rank_);
  ignore_sigpipe();
  ::gloo::transport::tcp::attr attr;
  attr.hostname = options.host;
  try {
    auto device = ::gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<::gloo::rendezvous::Context>(rank_, size_);
    context->setTimeout(timeout_);
    GlooStoreAdapter store(options.store, JoinWait{.communicator = options.name,
                                                   .rank = rank_,
                                                   .timeout = timeout_,
                                                   .warn_every = options.flight.hang_warn});
    context->connectFullMesh(store, device);
    context_ = context;
    recorder_ = std::make_unique<FlightRecorder>(
        options.store, rank_, size_, FlightRecorder::publish_interval(size_), options.flight);
  } catch (const ::gloo::Exception& e) {
    throw from_gloo(
        "rank " + std::to_string(rank_) + " connecting the Gloo mesh on " + options.host, e);
  }
  log::get("gloo")->debug("mesh of {} ranks connected on {}", size_, options.host);
}

GlooCommunicator::~GlooCommunicator() = default;

std::uint32_t GlooCommunicator::next_tag(std::string_view op, std::uint64_t a, std::uint64_t b) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the operation's name, then a and b
  for (char c : op) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  h = (h ^ a) * 0x9e3779b97f4a7c15ull;
  h = (h ^ b) * 0x9e3779b97f4a7c15ull;
  const std::uint32_t number = next_tag_++ & 0xFFFFFu;
  return number << 12 | static_cast<std::uint32_t>(h >> 52);
}

namespace {
// What a buffer is, for a tag: its dtype and byte count.
std::uint64_t shape_of(const BufferView& buf) {
  return static_cast<std::uint64_t>(buf.bytes()) << 8 | static_cast<std::uint64_t>(buf.dtype);
}
}  // namespace

template <typename Fn>
std::shared_ptr<Work> GlooCommunicator::enqueue(const char* op, std::uint32_t tag,
                                                std::uint64_t call, Fn&& fn,
                                                std::shared_ptr<CpuWork> work) {
  // Collectives by their flight-recorder number, point-to-point by tag.
  std::string what = std::string("gloo ") + op +
                     (call != 0 ? " #" + std::to_string(call) : " tag " + std::to_string(tag)) +
                     " on rank " + std::to_string(rank_);
  if (!work) work = std::make_shared<CpuWork>(what, timeout_ + std::chrono::seconds(5));
  if (aborted_) {
    if (call != 0) recorder_->completed(call);
    work->fail(Error(ErrorCategory::kBackend, what + ": communicator was aborted"));
    return work;
  }
  OpArgs args{.context = context_, .tag = tag, .timeout = timeout_};
  track(work);
  std::shared_ptr<Work> result = work;
  if (group_) group_->works.push_back(work);
  queue_.post([this, work, what, args, call, fn = std::forward<Fn>(fn)]() {
    struct MarkDone {  // in the flight recorder, however the operation ends
      FlightRecorder* recorder;
      std::uint64_t call;
      ~MarkDone() {
        if (call != 0) recorder->completed(call);
      }
    } mark_done{recorder_.get(), call};
    if (aborted_) {
      work->fail(Error(ErrorCategory::kBackend, what + ": communicator was aborted"));
      return;
    }
    try {
      fn(args);
      work->complete();
    } catch (const ::gloo::Exception& e) {
      Error error = from_gloo(what, e);
      if ((timed_out(e.what()) || peer_gone(e.what())) && call != 0) {
        std::string why = recorder_->diagnose(call);
        if (!why.empty()) error = Error(error.category(), std::string(error.what()) + "; " + why);
      }
      work->fail(error);
    } catch (const Error& e) {
      work->fail(e);
    } catch (const std::exception& e) {
      work->fail(Error(ErrorCategory::kInternal, what + ": " + e.what()));
    }
  });
  return result;
}

std::shared_ptr<Work> GlooCommunicator::all_reduce(BufferView in, BufferView out, ReduceOp op,
                                                   StreamRef) {
  validate::all_reduce(in, out, op, DeviceType::kCpu);
  return enqueue("all_reduce", next_tag("all_reduce", shape_of(in), static_cast<int>(op)),
                 record(describe::all_reduce(in, op)), [in, out, op](const OpArgs& args) {
                   if (in.count > 0) run_all_reduce(args, in, out, op);
                 });
}

std::shared_ptr<Work> GlooCommunicator::broadcast(BufferView buf, int root, StreamRef) {
  validate::broadcast(buf, root, size_, DeviceType::kCpu);
  return enqueue("broadcast", next_tag("broadcast", shape_of(buf), root),
                 record(describe::broadcast(buf, root)), [buf, root](const OpArgs& args) {
                   if (buf.count > 0) run_broadcast(args, buf, root);
                 });
}

std::shared_ptr<Work> GlooCommunicator::all_gather(BufferView in, BufferView out, StreamRef) {
  validate::all_gather(in, out, size_, DeviceType::kCpu);
  const int rank = rank_;
  return enqueue("all_gather", next_tag("all_gather", shape_of(in)),
                 record(describe::all_gather(in)), [in, out, rank](const OpArgs& args) {
                   if (in.count == 0) return;
                   auto* slot = static_cast<char*>(out.data) + rank * in.bytes();
                   if (slot != in.data) std::memmove(slot, in.data, in.bytes());
                   run_all_gather(args, out, in.bytes());
                 });
}

std::shared_ptr<Work> GlooCommunicator::reduce_scatter(BufferView in, BufferView out, ReduceOp op,
                                                       StreamRef) {
  validate::reduce_scatter(in, out, op, size_, DeviceType::kCpu);
  const int rank = rank_;
  // Gloo's function API has no reduce-scatter: reduce the whole input into a
  // scratch copy (the input is left intact) and keep this rank's slice.
  return enqueue("reduce_scatter", next_tag("reduce_scatter", shape_of(out), static_cast<int>(op)),
                 record(describe::reduce_scatter(out, op)),
                 [in, out, op, rank](const OpArgs& args) {
                   if (out.count == 0) return;
                   std::vector<char> scratch(in.bytes());
                   BufferView whole = in;
                   whole.data = scratch.data();
                   run_all_reduce(args, in, whole, op);
                   std::memmove(out.data, scratch.data() + rank * out.bytes(), out.bytes());
                 });
}

std::shared_ptr<Work> GlooCommunicator::all_to_all(BufferView in, BufferView out, StreamRef) {
  validate::all_to_all(in, out, size_, DeviceType::kCpu);
  return enqueue("all_to_all", next_tag("all_to_all", shape_of(in)),
                 record(describe::all_to_all(in)), [in, out](const OpArgs& args) {
                   if (in.count > 0) run_all_to_all(args, in, out);
                 });
}

std::shared_ptr<Work> GlooCommunicator::barrier(StreamRef) {
  return enqueue("barrier", next_tag("barrier"), record(describe::barrier()),
                 [](const OpArgs& args) { run_barrier(args); });
}

std::shared_ptr<Work> GlooCommunicator::point_to_point(bool is_send, BufferView buf, int peer,
                                                       int tag) {
  const char* op = is_send ? "send" : "recv";
  const bool any_source = !is_send && peer == kAnySource;
  if (any_source) {
    validate::buffer_on(op, buf, DeviceType::kCpu);
    if (size_ < 2) throw Error(ErrorCategory::kInvalidArgument, "recv: no other rank to send");
  } else {
    validate::point_to_point(op, buf, peer, rank_, size_, DeviceType::kCpu);
  }
  if (tag < 0)
    throw Error(ErrorCategory::kInvalidArgument, std::string(op) + ": tag must be non-negative");
  P2POp p2p{is_send, buf, peer, static_cast<std::uint32_t>(tag)};
  if (group_) {
    if (any_source) {
      throw Error(ErrorCategory::kInvalidArgument,
                  "recv: a receive from any source cannot be in a group");
    }
    group_->p2p.push_back(PendingP2P{is_send, buf, peer, p2p.tag});
    if (!group_->p2p_work) {
      group_->p2p_work =
          std::make_shared<CpuWork>("gloo group send/recv on rank " + std::to_string(rank_),
                                    timeout_ + std::chrono::seconds(5));
    }
    return group_->p2p_work;
  }
  return post_now(op, p2p);
}

// Posted on the caller's thread and waited for on p2p_waits_'s, not run on
// the queue: a receive that waits for its message must not hold back a send
// posted after it (batch_isend_irecv posts each rank's receive first).
std::shared_ptr<Work> GlooCommunicator::post_now(const char* op, const P2POp& p2p) {
  const std::string what = std::string("gloo ") + op + " tag " + std::to_string(p2p.tag) +
                           (p2p.peer == kAnySource ? " from any rank" : "") + " on rank " +
                           std::to_string(rank_);
  auto work = std::make_shared<CpuWork>(what, timeout_ + std::chrono::seconds(5));
  if (aborted_) {
    work->fail(Error(ErrorCategory::kBackend, what + ": communicator was aborted"));
    return work;
  }
  if (p2p.buf.count == 0) {
    work->complete();  // nothing to move (Gloo refuses empty buffers)
    return work;
  }
  std::shared_ptr<::gloo::transport::UnboundBuffer> buf;
  try {
    buf =
        post_point_to_point(OpArgs{.context = context_, .tag = p2p.tag, .timeout = timeout_}, p2p);
  } catch (const ::gloo::Exception& e) {
    throw from_gloo(what, e);
  }
  track(work);
  track_posted(buf, p2p.is_send);
  p2p_waits_.post([work, buf, p2p, what, timeout = timeout_] {
    try {
      work->complete_from(wait_point_to_point(*buf, p2p, timeout));
    } catch (const ::gloo::Exception& e) {
      work->fail(from_gloo(what, e));
    } catch (const std::exception& e) {
      work->fail(Error(ErrorCategory::kInternal, what + ": " + e.what()));
    }
  });
  return work;
}

std::shared_ptr<Work> GlooCommunicator::send(BufferView buf, int peer, int tag, StreamRef) {
  return point_to_point(true, buf, peer, tag);
}

std::shared_ptr<Work> GlooCommunicator::recv(BufferView buf, int peer, int tag, StreamRef) {
  return point_to_point(false, buf, peer, tag);
}

std::shared_ptr<Work> GlooCommunicator::group(const std::function<void()>& body) {
  if (group_) throw Error(ErrorCategory::kInvalidArgument, "group: groups do not nest");
  group_ = std::make_unique<GroupState>();
  try {
    body();
  } catch (...) {
    group_.reset();
    throw;
  }
  std::unique_ptr<GroupState> state = std::move(group_);
  if (!state->p2p.empty()) {
    std::vector<P2POp> ops;
    for (const auto& p : state->p2p) ops.push_back(P2POp{p.is_send, p.buf, p.peer, p.tag});
    state->works.push_back(enqueue(
        "group send/recv", ops.front().tag, 0,
        [ops](const OpArgs& args) { run_point_to_point(args, ops); }, state->p2p_work));
  }
  return std::make_shared<GroupWork>(std::move(state->works), timeout_ + std::chrono::seconds(5));
}

std::unique_ptr<Communicator> GlooCommunicator::split(int color, int key) {
  // Every rank learns every (color, key) through this communicator, then the
  // members of each color build their own mesh under a store prefix of their own.
  std::vector<std::int64_t> mine{color, key};
  std::vector<std::int64_t> all(2 * static_cast<std::size_t>(size_));
  all_gather(view(mine.data(), 2), view(all.data(), all.size()), {})->wait();
  const std::uint32_t seq = next_split_++;
  if (color < 0) return nullptr;
  std::vector<std::pair<std::int64_t, int>> members;  // (key, parent rank)
  for (int r = 0; r < size_; ++r) {
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
  }
  std::sort(members.begin(), members.end());
  int new_rank = 0;
  while (members[new_rank].second != rank_) ++new_rank;
  GlooOptions sub = options_;
  sub.name = options_.name + "/split" + std::to_string(seq) + "/color" + std::to_string(color);
  sub.store = make_prefix_store("split" + std::to_string(seq) + "/color" + std::to_string(color),
                                options_.store);
  sub.rank = new_rank;
  sub.size = static_cast<int>(members.size());
  return std::make_unique<GlooCommunicator>(sub);
}

void GlooCommunicator::track(const std::shared_ptr<CpuWork>& work) {
  std::lock_guard<std::mutex> lock(pending_mu_);
  // Forget what finished now and then: the list stays as long as what is in flight.
  if (pending_.size() >= 64) {
    std::erase_if(pending_, [](const std::weak_ptr<CpuWork>& w) {
      auto p = w.lock();
      return !p || p->done();
    });
  }
  pending_.push_back(work);
}

void GlooCommunicator::track_posted(const std::shared_ptr<::gloo::transport::UnboundBuffer>& buf,
                                    bool is_send) {
  {
    std::lock_guard<std::mutex> lock(pending_mu_);
    // As track(): the list is swept now and then, not at every post.
    if (posted_.size() >= 64) {
      std::erase_if(posted_, [](const PostedBuffer& p) { return p.buf.expired(); });
    }
    posted_.push_back(PostedBuffer{buf, is_send});
  }
  // Posted while abort() ran: it may have looked at the list before this one.
  if (aborted_) is_send ? buf->abortWaitSend() : buf->abortWaitRecv();
}

void GlooCommunicator::abort() {
  // Every queued and later operation fails at once; the one in flight fails
  // through its connections: each pair fails what waits on it, as it does
  // when its peer's connection breaks (a peer cut off leaves them open).
  if (aborted_.exchange(true)) return;
  const std::string why = "rank " + std::to_string(rank_) + ": the communicator was aborted";
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    fail_pair(*context_, peer, why);
  }
  // And every Work not done yet fails here, whatever Gloo does with the
  // operation it runs (the queue's thread may stay inside it until Gloo's own
  // timeout; the communicator's destructor waits for that, see Context).
  std::vector<std::weak_ptr<CpuWork>> pending;
  std::vector<PostedBuffer> posted;
  {
    std::lock_guard<std::mutex> lock(pending_mu_);
    pending.swap(pending_);
    posted.swap(posted_);
  }
  for (const auto& p : posted) {
    if (auto buf = p.buf.lock()) p.is_send ? buf->abortWaitSend() : buf->abortWaitRecv();
  }
  int failed_here = 0;
  for (const auto& w : pending) {
    auto work = w.lock();
    if (!work || work->done()) continue;
    work->fail(Error(ErrorCategory::kBackend, why));
    ++failed_here;
  }
  if (failed_here > 0) {
    log::get("gloo")->info("rank {}: the abort failed {} operation(s) still pending", rank_,
                           failed_here);
  }
}

}  // namespace rtd::gloo_backend
