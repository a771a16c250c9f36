// Unique-id exchange: one store key per communicator (the store is already scoped).
#include "collectives/nccl/nccl_bootstrap.h"

#include <cstring>

#include "collectives/nccl/nccl_check.h"

namespace rtd::nccl {

ncclUniqueId exchange_unique_id(Store& store, NcclApi& api, const JoinWait& wait) {
  const int rank = wait.rank;
  constexpr const char* kKey = "nccl_unique_id";
  ncclUniqueId id{};
  if (rank == 0) {
    ncclResult_t rc = api.get_unique_id(&id);
    if (rc != ncclSuccess) throw nccl_error(api, nullptr, rc, "rank 0 creating the NCCL unique id");
    store.set(kKey, std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
    return id;
  }
  std::string bytes = await_join(store, kKey, wait);
  if (bytes.size() != sizeof(id)) {
    throw Error(ErrorCategory::kInternal, "NCCL unique id in the store has " +
                                              std::to_string(bytes.size()) + " bytes, expected " +
                                              std::to_string(sizeof(id)));
  }
  std::memcpy(&id, bytes.data(), sizeof(id));
  return id;
}

}  // namespace rtd::nccl
