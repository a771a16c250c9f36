// Gloo's TCP pair, reached for its one call that fails its waiters
// (pair_abort.h). Its header needs gloo/common/memory.h, which some
// packagings of Gloo leave out: header_fix/ stands in for it.
#include "collectives/gloo/pair_abort.h"

#include <gloo/transport/tcp/pair.h>

namespace rtd::gloo_backend {
namespace {

// The call is protected (Gloo's buffers make it when their wait times out).
// A pointer to it, named through a derived class, may be taken there and
// applied to any pair; the class is never made.
struct PairAccess : ::gloo::transport::tcp::Pair {
  static auto fail_waiters() { return &PairAccess::signalExceptionExternal; }
};

}  // namespace

bool fail_pair(::gloo::Context& context, int peer, const std::string& why) {
  auto* pair = dynamic_cast<::gloo::transport::tcp::Pair*>(context.getPair(peer).get());
  if (pair == nullptr) return false;
  (pair->*PairAccess::fail_waiters())(why);
  return true;
}

}  // namespace rtd::gloo_backend
