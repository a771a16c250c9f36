// check_ranks_agree (rank_agreement.h).
#include "sharding/rank_agreement.h"

#include <unistd.h>

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

void check_every_rank_can(Store& store, const std::string& key_prefix, int rank, int size,
                          const std::string& problem, const std::string& who,
                          const std::string& advice, ErrorCategory category) {
  store.set(key_prefix + std::to_string(rank), problem.empty() ? "ok" : "no " + problem);
  std::string problems;
  int named = 0;
  for (int r = 0; r < size; ++r) {
    const std::string theirs = store.get(key_prefix + std::to_string(r), kAgreementTimeout);
    if (theirs == "ok") continue;
    if (++named <= 4) {
      problems += (problems.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + ": " +
                  theirs.substr(3);
    }
  }
  if (named > 4) problems += "; and " + std::to_string(named - 4) + " more ranks";
  if (named > 0) throw Error(category, who + ": " + problems + "; " + advice);
}

int ranks_on_this_host(Store& store, const std::string& key_prefix, int rank, int size) {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  store.set(key_prefix + std::to_string(rank), name);
  int same = 0;
  for (int r = 0; r < size; ++r)
    same += store.get(key_prefix + std::to_string(r), kAgreementTimeout) == name;
  return same;
}

}  // namespace rtd
