// The C interface of rt_dist/c_api.h: handles around Communicator and Work,
// a Store over the caller's callbacks, and errors kept per thread.
#include "rt_dist/c_api.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collectives/factory.h"
#include "rt_dist/error.h"
#include "runtime/c_api_errors.h"
#include "runtime/c_api_store.h"
#include "runtime/core/config.h"
#include "runtime/core/log.h"
#include "runtime/env.h"

namespace {

using rtd::c_api::guarded;
using rtd::c_api::set_error;

rtd::BufferView view(void* data, int64_t count, int dtype, int device) {
  if (count < 0) throw rtd::Error(rtd::ErrorCategory::kInvalidArgument, "negative count");
  if (dtype < RTD_FLOAT32 || dtype > RTD_FLOAT16) {
    throw rtd::Error(rtd::ErrorCategory::kInvalidArgument,
                     "dtype " + std::to_string(dtype) + " is not one of rt_dist's");
  }
  return rtd::BufferView{.data = data,
                         .count = static_cast<std::size_t>(count),
                         .dtype = static_cast<rtd::DType>(dtype),
                         .device = device < 0 ? rtd::DeviceType::kCpu : rtd::DeviceType::kCuda,
                         .device_index = device < 0 ? 0 : device};
}

rtd::ReduceOp reduce_op(int op) {
  if (op < RTD_SUM || op > RTD_MAX) {
    throw rtd::Error(rtd::ErrorCategory::kInvalidArgument,
                     "reduction " + std::to_string(op) + " is not one of rt_dist's");
  }
  return static_cast<rtd::ReduceOp>(op);
}

rtd::StreamRef stream_ref(void* stream) { return rtd::StreamRef{stream}; }

}  // namespace

struct rtd_comm {
  std::shared_ptr<rtd::c_api::CallbackStore> store;
  std::unique_ptr<rtd::Communicator> comm;
};

struct rtd_work {
  std::shared_ptr<rtd::Work> work;
};

struct rtd_persistent {
  std::unique_ptr<rtd::PersistentAllReduce> reduce;       // an all-reduce, or
  std::unique_ptr<rtd::PersistentShardCollective> shard;  // an all-gather or reduce-scatter
  std::string method;
  rtd::BufferView buffer;  // a shard collective's: its dtype and device
  bool gather = false;
  int shard_size = 0;  // a shard collective's world size
};

namespace {

rtd_comm& checked(rtd_comm* comm) {
  if (!comm || !comm->comm) {
    throw rtd::Error(rtd::ErrorCategory::kInvalidArgument, "the communicator is gone");
  }
  return *comm;
}

rtd_work* wrap(std::shared_ptr<rtd::Work> work) { return new rtd_work{std::move(work)}; }

}  // namespace

extern "C" {

int rtd_c_api_version(void) { return RTD_C_API_VERSION; }

const char* rtd_last_error(void) { return rtd::c_api::last_error().c_str(); }

int rtd_last_error_category(void) { return rtd::c_api::last_category(); }

void rtd_store_reply(void* reply, const void* data, size_t len) {
  static_cast<std::string*>(reply)->assign(static_cast<const char*>(data), len);
}

rtd_comm* rtd_comm_create(const rtd_store_ops* ops, const char* backend, const char* name, int rank,
                          int size, int device, const char* host, int64_t timeout_ms,
                          int copy_engines) {
  const rtd_comm_options options{copy_engines, -1, -1};
  return rtd_comm_create_with(ops, backend, name, rank, size, device, host, timeout_ms, &options);
}

rtd_comm* rtd_comm_create_with(const rtd_store_ops* ops, const char* backend, const char* name,
                               int rank, int size, int device, const char* host, int64_t timeout_ms,
                               const rtd_comm_options* options) {
  const rtd_comm_options chosen = options ? *options : rtd_comm_options{0, -1, -1};
  return guarded<rtd_comm*>(nullptr, [&]() -> rtd_comm* {
    rtd::c_api::check_store_ops(ops);
    if (!backend || (std::strcmp(backend, "gloo") != 0 && std::strcmp(backend, "nccl") != 0)) {
      throw rtd::Error(
          rtd::ErrorCategory::kInvalidArgument,
          std::string("backend '") + (backend ? backend : "") + "' is not gloo or nccl");
    }
    if (timeout_ms <= 0) {
      throw rtd::Error(rtd::ErrorCategory::kInvalidArgument, "the timeout must be positive");
    }
    // The process's configuration supplies what the caller leaves out (the
    // NCCL settings, the hang warning, where Gloo listens).
    rtd::Config config = rtd::Config::from_env(rtd::read_process_env());
    // The caller's rank and size are the authority: a launcher's variables
    // only name the process in log lines and pick where Gloo listens, and
    // variables that do not agree (WORLD_SIZE without RANK, as a test harness
    // leaves them) must not stop a caller that passed both.
    rtd::WorldInfo world;
    try {
      world = rtd::detect_world(config);
    } catch (const rtd::Error&) {
      world.rank = rank;
      world.world_size = size;
      world.local_world_size = size == 1 ? 1 : 0;  // unknown: listen on the host's name
    }
    // Log levels (RTD_LOG) and the process's name in each line, as init()
    // sets them: a process that only uses this interface never calls init().
    rtd::log::setup(
        "rank " + std::to_string(world.rank) + "/local " + std::to_string(world.local_rank),
        config.log_spec);
    std::string listen = host && *host ? host : rtd::data_host(config, world);
    auto handle = std::make_unique<rtd_comm>();
    handle->store = std::make_shared<rtd::c_api::CallbackStore>(*ops);
    rtd::CommunicatorOptions o = rtd::communicator_defaults(config);
    o.backend = backend;
    o.store = handle->store;
    o.name = name && *name ? name : "torch";
    o.rank = rank;
    o.size = size;
    o.host = listen;
    o.device = device < 0 ? 0 : device;
    o.timeout = std::chrono::milliseconds(timeout_ms);
    o.nccl.staged_copy_engines = chosen.copy_engines != 0;
    if (chosen.inline_bytes >= 0) o.nccl.inline_bytes = chosen.inline_bytes;
    o.nccl.stream_priority = chosen.stream_priority;
    handle->comm = rtd::make_communicator(o);
    return handle.release();
  });
}

void rtd_comm_destroy(rtd_comm* comm) {
  guarded<int>(0, [&] {
    delete comm;  // the communicator's destructor bounds its own wait
    return 0;
  });
}

void rtd_comm_abort(rtd_comm* comm) {
  guarded<int>(0, [&] {
    checked(comm).comm->abort();
    return 0;
  });
}

int rtd_comm_failed(rtd_comm* comm) {
  return guarded<int>(1, [&] {
    if (auto e = checked(comm).comm->failure()) {
      set_error(*e);
      return 1;
    }
    return 0;
  });
}

void rtd_comm_on_failure(rtd_comm* comm, void (*fn)(void* arg), void* arg) {
  guarded<int>(0, [&] {
    std::function<void()> listener;
    if (fn) listener = [fn, arg] { fn(arg); };
    checked(comm).comm->on_failure(std::move(listener));
    return 0;
  });
}

void* rtd_comm_stream(rtd_comm* comm) {
  return guarded<void*>(nullptr, [&] { return checked(comm).comm->stream().cuda_stream; });
}

rtd_work* rtd_all_reduce(rtd_comm* comm, void* in, void* out, int64_t count, int dtype, int op,
                         int device, void* stream) {
  return guarded<rtd_work*>(nullptr, [&] {
    return wrap(checked(comm).comm->all_reduce(view(in, count, dtype, device),
                                               view(out, count, dtype, device), reduce_op(op),
                                               stream_ref(stream)));
  });
}

rtd_work* rtd_broadcast(rtd_comm* comm, void* buf, int64_t count, int dtype, int root, int device,
                        void* stream) {
  return guarded<rtd_work*>(nullptr, [&] {
    return wrap(
        checked(comm).comm->broadcast(view(buf, count, dtype, device), root, stream_ref(stream)));
  });
}

rtd_work* rtd_all_gather(rtd_comm* comm, void* in, void* out, int64_t count, int dtype, int device,
                         void* stream) {
  return guarded<rtd_work*>(nullptr, [&] {
    rtd_comm& c = checked(comm);
    return wrap(c.comm->all_gather(view(in, count, dtype, device),
                                   view(out, count * c.comm->size(), dtype, device),
                                   stream_ref(stream)));
  });
}

rtd_work* rtd_reduce_scatter(rtd_comm* comm, void* in, void* out, int64_t count, int dtype, int op,
                             int device, void* stream) {
  return guarded<rtd_work*>(nullptr, [&] {
    rtd_comm& c = checked(comm);
    return wrap(c.comm->reduce_scatter(view(in, count * c.comm->size(), dtype, device),
                                       view(out, count, dtype, device), reduce_op(op),
                                       stream_ref(stream)));
  });
}

rtd_work* rtd_all_to_all(rtd_comm* comm, void* in, void* out, int64_t count, int dtype, int device,
                         void* stream) {
  return guarded<rtd_work*>(nullptr, [&] {
    return wrap(checked(comm).comm->all_to_all(
        view(in, count, dtype, device), view(out, count, dtype, device), stream_ref(stream)));
  });
}

rtd_work* rtd_barrier(rtd_comm* comm, void* stream) {
  return guarded<rtd_work*>(nullptr,
                            [&] { return wrap(checked(comm).comm->barrier(stream_ref(stream))); });
}

rtd_work* rtd_group(rtd_comm* comm, const rtd_op* ops, int n, int device, void* stream) {
  return guarded<rtd_work*>(nullptr, [&] {
    rtd::Communicator& x = *checked(comm).comm;
    if (n < 0 || (n > 0 && !ops)) {
      throw rtd::Error(rtd::ErrorCategory::kInvalidArgument, "a group of no operations");
    }
    // Every operation's arguments are checked before the group starts, so a
    // bad one launches nothing.
    struct Planned {
      int kind;
      rtd::BufferView in, out;
      rtd::ReduceOp op;
      int peer;
    };
    const std::int64_t size = x.size();
    std::vector<Planned> planned;
    planned.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      const rtd_op& o = ops[i];
      const bool reduces = o.kind == RTD_OP_ALL_REDUCE || o.kind == RTD_OP_REDUCE_SCATTER;
      const std::int64_t in_count = o.kind == RTD_OP_REDUCE_SCATTER ? o.count * size : o.count;
      const std::int64_t out_count = o.kind == RTD_OP_ALL_GATHER ? o.count * size : o.count;
      switch (o.kind) {
        case RTD_OP_ALL_REDUCE:
        case RTD_OP_BROADCAST:
        case RTD_OP_ALL_GATHER:
        case RTD_OP_REDUCE_SCATTER:
        case RTD_OP_SEND:
        case RTD_OP_RECV:
          break;
        default:
          throw rtd::Error(rtd::ErrorCategory::kInvalidArgument,
                           "operation kind " + std::to_string(o.kind) + " is not one of rt_dist's");
      }
      planned.push_back(Planned{o.kind, view(o.in, in_count, o.dtype, device),
                                view(o.out, out_count, o.dtype, device),
                                reduces ? reduce_op(o.op) : rtd::ReduceOp::kSum, o.peer});
    }
    const rtd::StreamRef s = stream_ref(stream);
    return wrap(x.group([&] {
      for (const Planned& p : planned) {
        switch (p.kind) {
          case RTD_OP_ALL_REDUCE:
            x.all_reduce(p.in, p.out, p.op, s);
            break;
          case RTD_OP_BROADCAST:
            x.broadcast(p.in, p.peer, s);
            break;
          case RTD_OP_ALL_GATHER:
            x.all_gather(p.in, p.out, s);
            break;
          case RTD_OP_REDUCE_SCATTER:
            x.reduce_scatter(p.in, p.out, p.op, s);
            break;
          case RTD_OP_SEND:
            x.send(p.in, p.peer, 0, s);
            break;
          default:  // RTD_OP_RECV
            x.recv(p.out, p.peer, 0, s);
            break;
        }
      }
    }));
  });
}

rtd_work* rtd_send(rtd_comm* comm, void* buf, int64_t count, int dtype, int peer, int tag,
                   int device, void* stream) {
  return guarded<rtd_work*>(nullptr, [&] {
    return wrap(
        checked(comm).comm->send(view(buf, count, dtype, device), peer, tag, stream_ref(stream)));
  });
}

rtd_work* rtd_recv(rtd_comm* comm, void* buf, int64_t count, int dtype, int peer, int tag,
                   int device, void* stream) {
  return guarded<rtd_work*>(nullptr, [&] {
    return wrap(
        checked(comm).comm->recv(view(buf, count, dtype, device), peer, tag, stream_ref(stream)));
  });
}

int rtd_work_done(rtd_work* work) {
  return guarded<int>(1, [&] { return work && work->work && !work->work->done() ? 0 : 1; });
}

int rtd_work_wait(rtd_work* work, int64_t timeout_ms) {
  return guarded<int>(1, [&] {
    if (!work || !work->work) return 0;
    if (timeout_ms < 0)
      work->work->wait();
    else
      work->work->wait(std::chrono::milliseconds(timeout_ms));
    return 0;
  });
}

int rtd_work_wait_stream(rtd_work* work, void* stream) {
  return guarded<int>(1, [&] {
    if (work && work->work) work->work->wait(stream_ref(stream));
    return 0;
  });
}

int rtd_work_error(rtd_work* work) {
  return guarded<int>(1, [&] {
    if (!work || !work->work) return 0;
    if (auto e = work->work->error()) {
      set_error(*e);
      return 1;
    }
    return 0;
  });
}

int rtd_work_source(rtd_work* work) {
  return guarded<int>(-1, [&] { return work && work->work ? work->work->source() : -1; });
}

void rtd_work_free(rtd_work* work) { delete work; }

rtd_persistent* rtd_persistent_all_reduce(rtd_comm* comm, void* buf, int64_t count, int dtype,
                                          int op, int device, int copy_engines) {
  return guarded<rtd_persistent*>(nullptr, [&] {
    rtd_comm& c = checked(comm);
    auto reduce = c.comm->persistent_all_reduce({view(buf, count, dtype, device)}, reduce_op(op),
                                                rtd::PersistentOptions{copy_engines != 0});
    std::string method = reduce->method();
    return new rtd_persistent{std::move(reduce), nullptr, std::move(method)};
  });
}

rtd_work* rtd_persistent_run(rtd_persistent* reduce, void* stream) {
  return guarded<rtd_work*>(nullptr, [&] {
    if (!reduce || !reduce->reduce) {
      throw rtd::Error(rtd::ErrorCategory::kInvalidArgument,
                       "not a persistent all-reduce (gone, or an all-gather or reduce-scatter)");
    }
    return wrap(reduce->reduce->run(0, stream_ref(stream)));
  });
}

const char* rtd_persistent_method(rtd_persistent* reduce) {
  return reduce ? reduce->method.c_str() : "";
}

void rtd_persistent_free(rtd_persistent* reduce) { delete reduce; }

rtd_persistent* rtd_persistent_all_gather(rtd_comm* comm, void* buf, int64_t count, int dtype,
                                          int device, int copy_engines) {
  return guarded<rtd_persistent*>(nullptr, [&] {
    rtd_comm& c = checked(comm);
    const rtd::BufferView b = view(buf, count, dtype, device);
    auto shard = c.comm->persistent_all_gather({b}, rtd::PersistentOptions{copy_engines != 0});
    std::string method = shard->method();
    return new rtd_persistent{nullptr, std::move(shard), std::move(method), b,
                              true,    c.comm->size()};
  });
}

rtd_persistent* rtd_persistent_reduce_scatter(rtd_comm* comm, void* buf, int64_t count, int dtype,
                                              int op, int device, int copy_engines) {
  return guarded<rtd_persistent*>(nullptr, [&] {
    rtd_comm& c = checked(comm);
    const rtd::BufferView b = view(buf, count, dtype, device);
    auto shard = c.comm->persistent_reduce_scatter({b}, reduce_op(op),
                                                   rtd::PersistentOptions{copy_engines != 0});
    std::string method = shard->method();
    return new rtd_persistent{nullptr, std::move(shard), std::move(method), b,
                              false,   c.comm->size()};
  });
}

rtd_work* rtd_persistent_shard_run(rtd_persistent* shard, void* in, void* out, int64_t count,
                                   void* stream) {
  return guarded<rtd_work*>(nullptr, [&] {
    if (!shard || !shard->shard) {
      throw rtd::Error(rtd::ErrorCategory::kInvalidArgument,
                       "not a persistent all-gather or reduce-scatter (gone, or an all-reduce)");
    }
    if (count < 0 || count > INT64_MAX / std::max(1, shard->shard_size)) {
      throw rtd::Error(rtd::ErrorCategory::kInvalidArgument,
                       "count " + std::to_string(count) + " out of range");
    }
    // The gathered side holds `size` blocks of `count`; the other one block.
    const int64_t whole = count * shard->shard_size;
    rtd::BufferView a = shard->buffer, b = shard->buffer;
    a.data = in;
    b.data = out;
    a.count = static_cast<std::size_t>(shard->gather ? count : whole);
    b.count = static_cast<std::size_t>(shard->gather ? whole : count);
    return wrap(shard->shard->run(a, b, stream_ref(stream)));
  });
}

int rtd_persistent_sources_unchanged(rtd_persistent* shard) {
  return shard && shard->shard && !shard->shard->sources_unchanged() ? 0 : 1;
}

int rtd_persistent_gathers_blocks(rtd_persistent* shard) {
  return shard && shard->shard && shard->gather && shard->shard->gathers_blocks() ? 1 : 0;
}

rtd_work* rtd_persistent_gather_blocks(rtd_persistent* shard, void* const* outs,
                                       const int64_t* counts, int n_outs, void* stream) {
  return guarded<rtd_work*>(nullptr, [&] {
    if (!shard || !shard->shard || !shard->gather) {
      throw rtd::Error(rtd::ErrorCategory::kInvalidArgument,
                       "not a persistent all-gather (gone, or a reduction)");
    }
    constexpr int kMaxOuts = 1 << 16;
    if (n_outs <= 0 || n_outs > kMaxOuts || !outs || !counts) {
      throw rtd::Error(rtd::ErrorCategory::kInvalidArgument,
                       "gather_blocks: " + std::to_string(n_outs) + " outputs (1 to " +
                           std::to_string(kMaxOuts) + ", with their counts)");
    }
    std::vector<rtd::BufferView> views;
    views.reserve(static_cast<std::size_t>(n_outs));
    for (int k = 0; k < n_outs; ++k) {
      if (counts[k] < 0 || static_cast<uint64_t>(counts[k]) > shard->buffer.count) {
        throw rtd::Error(rtd::ErrorCategory::kInvalidArgument,
                         "gather_blocks: output " + std::to_string(k) + "'s count " +
                             std::to_string(counts[k]) + " is outside 0.." +
                             std::to_string(shard->buffer.count));
      }
      rtd::BufferView v = shard->buffer;
      v.data = outs[k];
      v.count = static_cast<std::size_t>(counts[k]);
      views.push_back(v);
    }
    return wrap(shard->shard->gather_blocks(views, stream_ref(stream)));
  });
}

}  // extern "C"
