// The Gloo calls behind GlooCommunicator, typed by dtype: each runs on the
// communicator's queue thread and throws gloo exceptions as Gloo does.
// bfloat16 is reduced in float32 (converted, reduced, converted back).
#pragma once

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "rt_dist/types.h"

namespace rtd::gloo_backend {

struct OpArgs {
  std::shared_ptr<::gloo::Context> context;
  std::uint32_t tag = 0;
  std::chrono::milliseconds timeout{0};
};

// out = reduce(in); in and out may be the same buffer.
void run_all_reduce(const OpArgs& args, const BufferView& in, const BufferView& out, ReduceOp op);
void run_broadcast(const OpArgs& args, const BufferView& buf, int root);
// out's own slot already holds this rank's input.
void run_all_gather(const OpArgs& args, const BufferView& out, std::size_t bytes_per_rank);
void run_all_to_all(const OpArgs& args, const BufferView& in, const BufferView& out);
void run_barrier(const OpArgs& args);
struct P2POp {
  bool is_send;
  BufferView buf;
  int peer;  // a receive's kAnySource: from whichever other rank sends first
  std::uint32_t tag;
};
// One send or receive, posted now: Gloo lets any thread post beside the queue
// thread's collectives (their slots differ), so that a receive waiting for
// its message never holds back a send posted after it.
std::unique_ptr<::gloo::transport::UnboundBuffer> post_point_to_point(const OpArgs& args,
                                                                      const P2POp& op);
// Waits for a posted operation; returns the rank it went to or came from.
int wait_point_to_point(::gloo::transport::UnboundBuffer& buf, const P2POp& op,
                        std::chrono::milliseconds timeout);
// Posts every send and receive first, then waits for all of them, so that
// pairs of operations in any order cannot wait on each other.
void run_point_to_point(const OpArgs& args, const std::vector<P2POp>& ops);

}  // namespace rtd::gloo_backend
