// check_ranks_agree (rank_agreement.h).
#include "sharding/rank_agreement.h"

#include <chrono>

#include "rt_dist/error.h"

namespace rtd {
namespace {
constexpr std::chrono::seconds kAgreementTimeout{300};
}  // namespace

void check_ranks_agree(Store& store, const std::string& key_prefix, int rank, int size,
                       const std::string& mine, const std::string& who, const std::string& advice) {
  store.set(key_prefix + std::to_string(rank), mine);
  for (int r = 0; r < size; ++r) {
    std::string theirs = store.get(key_prefix + std::to_string(r), kAgreementTimeout);
    if (theirs != mine) {
      throw Error(ErrorCategory::kInvalidArgument,
                  who + ": rank " + std::to_string(rank) + " registered " + mine + " but rank " +
                      std::to_string(r) + " registered " + theirs + "; " + advice);
    }
  }
}

}  // namespace rtd
