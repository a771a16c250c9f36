// Gloo's TCP pair and unbound buffer, reached for the calls that fail their
// waiters (pair_abort.h). Their headers need gloo/common/memory.h, which
// some packagings of Gloo leave out: header_fix/ stands in for it.
#include "collectives/gloo/pair_abort.h"

#include <gloo/transport/tcp/pair.h>
#include <gloo/transport/tcp/unbound_buffer.h>

#include <mutex>

namespace rtd::gloo_backend {
namespace {

using ::gloo::transport::tcp::Pair;
using ::gloo::transport::tcp::UnboundBuffer;

// These members are protected (Gloo's buffers and pairs reach them as
// friends). Pointers to them, named through derived classes, may be taken
// there and applied to any pair or buffer; the classes are never made.
struct PairAccess : Pair {
  static auto fail_waiters() { return &PairAccess::signalExceptionExternal; }
  static auto lock() { return &PairAccess::m_; }
  static auto reading() { return &PairAccess::rx_; }
  static auto writing() { return &PairAccess::tx_; }
};
struct BufferAccess : UnboundBuffer {
  static auto fail_waiters() { return &BufferAccess::signalException; }
};

void fail_buffer(const ::gloo::WeakNonOwningPtr<UnboundBuffer>& weak, std::exception_ptr ex) {
  ::gloo::NonOwningPtr<UnboundBuffer> buf(weak);
  if (buf) (buf.operator->()->*BufferAccess::fail_waiters())(std::move(ex));
}

}  // namespace

bool fail_pair(::gloo::Context& context, int peer, const std::string& why) {
  auto* pair = dynamic_cast<Pair*>(context.getPair(peer).get());
  if (pair == nullptr) return false;
  std::exception_ptr ex = (pair->*PairAccess::fail_waiters())(why);
  // Gloo fails the buffers that wait for the peer's notification, but not
  // the one whose bytes are being read (rx_) nor those being written (tx_):
  // the pair is closed now, so they would wait until Gloo's timeout, and
  // the communicator's thread with them.
  std::lock_guard<std::mutex> lock(pair->*PairAccess::lock());
  fail_buffer((pair->*PairAccess::reading()).ubuf, ex);
  for (const auto& op : pair->*PairAccess::writing()) fail_buffer(op.ubuf, ex);
  return true;
}

}  // namespace rtd::gloo_backend
