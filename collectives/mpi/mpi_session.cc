// MpiSession: MPI_Init_thread once for the process, MPI_Finalize after the
// last user (mpi_session.h).
#include "collectives/mpi/mpi_session.h"

#include <cstdint>
#include <mutex>

#include "collectives/mpi/mpi_api.h"
#include "rt_dist/error.h"

namespace rtd::mpi {
namespace {

void check(const MpiApi& api, int rc, const char* call) {
  if (rc != 0) throw Error(ErrorCategory::kBackend, "MPI: " + api.describe(rc, call), rc);
}

}  // namespace

std::shared_ptr<MpiSession> MpiSession::shared() {
  static std::mutex mu;
  static std::weak_ptr<MpiSession> current;
  std::lock_guard<std::mutex> lock(mu);
  if (auto s = current.lock()) return s;
  const MpiApi& api = mpi_api();
  int already = 0, finalized = 0;
  check(api, api.initialized(&already), "MPI_Initialized");
  check(api, api.finalized(&finalized), "MPI_Finalized");
  if (finalized)
    throw Error(ErrorCategory::kConfig,
                "MPI was finalized in this process already: it cannot be used again");
  int level = 0;
  if (already) {
    check(api, api.query_thread(&level), "MPI_Query_thread");
  } else {
    check(api, api.init_thread(nullptr, nullptr, kThreadMultiple, &level), "MPI_Init_thread");
  }
  MpiCallLock::set_needed(level < kThreadMultiple);
  std::shared_ptr<MpiSession> s(new MpiSession(!already, level));
  current = s;
  return s;
}

MpiSession::MpiSession(bool finalize, int thread_level)
    : finalize_(finalize), thread_level_(thread_level) {}

MpiSession::~MpiSession() {
  const MpiApi& api = mpi_api();
  int done = 0;
  if (finalize_ && api.finalized(&done) == 0 && !done) api.finalize();
}

bool MpiSession::cuda_aware() const {
  const MpiApi& api = mpi_api();
  return api.cuda_support && api.cuda_support() == 1;
}

std::string MpiSession::broadcast(const std::string& value, int root) {
  const MpiApi& api = mpi_api();
  MpiCallLock lock;
  std::uint64_t size = value.size();
  check(api, api.bcast(&size, sizeof(size), api.byte, root, api.comm_world), "MPI_Bcast");
  std::string out = value;
  out.resize(size);
  if (size > 0) {
    check(api, api.bcast(out.data(), static_cast<int>(size), api.byte, root, api.comm_world),
          "MPI_Bcast");
  }
  return out;
}

}  // namespace rtd::mpi
