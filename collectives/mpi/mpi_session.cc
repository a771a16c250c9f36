// MpiSession: dlopen of Open MPI's libmpi (RTLD_GLOBAL: its components are
// themselves loaded libraries that need its symbols) and the entry points
// through dlsym. MPI_COMM_WORLD and MPI_BYTE are, in Open MPI's ABI, the
// addresses of the globals ompi_mpi_comm_world and ompi_mpi_byte.
#include "collectives/mpi/mpi_session.h"

#include <dlfcn.h>

#include <cstdint>

#include "rt_dist/error.h"

namespace rtd::mpi {

struct MpiSession::Api {
  void* lib = nullptr;
  int (*initialized)(int*) = nullptr;
  int (*finalized)(int*) = nullptr;
  int (*init)(int*, char***) = nullptr;
  int (*finalize)() = nullptr;
  int (*bcast)(void*, int, void*, int, void*) = nullptr;
  void* comm_world = nullptr;
  void* byte = nullptr;
};

namespace {

template <typename Fn>
void find(void* lib, const char* name, Fn* fn, std::string* missing) {
  *fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (!*fn) *missing += std::string(missing->empty() ? "" : ", ") + name;
}

void check(int rc, const char* call) {
  if (rc != 0) {
    throw Error(ErrorCategory::kBackend,
                std::string("MPI: ") + call + " failed (error " + std::to_string(rc) + ")", rc);
  }
}

}  // namespace

std::unique_ptr<MpiSession> MpiSession::open() {
  auto api = std::make_unique<Api>();
  for (const char* name : {"libmpi.so.40", "libmpi.so"}) {
    if ((api->lib = dlopen(name, RTLD_NOW | RTLD_GLOBAL))) break;
  }
  if (!api->lib) {
    throw Error(ErrorCategory::kConfig,
                "started by mpirun, but Open MPI's libmpi.so.40 cannot be loaded (" +
                    std::string(dlerror()) + "); install Open MPI, or start the job with dtrun");
  }
  std::string missing;
  find(api->lib, "MPI_Initialized", &api->initialized, &missing);
  find(api->lib, "MPI_Finalized", &api->finalized, &missing);
  find(api->lib, "MPI_Init", &api->init, &missing);
  find(api->lib, "MPI_Finalize", &api->finalize, &missing);
  find(api->lib, "MPI_Bcast", &api->bcast, &missing);
  find(api->lib, "ompi_mpi_comm_world", &api->comm_world, &missing);
  find(api->lib, "ompi_mpi_byte", &api->byte, &missing);
  if (!missing.empty()) {
    throw Error(ErrorCategory::kConfig,
                "the loaded libmpi is not Open MPI's, or too old: missing " + missing);
  }
  int already = 0;
  check(api->initialized(&already), "MPI_Initialized");
  if (!already) check(api->init(nullptr, nullptr), "MPI_Init");
  return std::unique_ptr<MpiSession>(new MpiSession(std::move(api), !already));
}

MpiSession::MpiSession(std::unique_ptr<Api> api, bool finalize)
    : api_(std::move(api)), finalize_(finalize) {}

MpiSession::~MpiSession() {
  int done = 0;
  if (finalize_ && api_->finalized(&done) == 0 && !done) api_->finalize();
}

std::string MpiSession::broadcast(const std::string& value, int root) {
  std::uint64_t size = value.size();
  check(api_->bcast(&size, sizeof(size), api_->byte, root, api_->comm_world), "MPI_Bcast");
  std::string out = value;
  out.resize(size);
  if (size > 0) {
    check(api_->bcast(out.data(), static_cast<int>(size), api_->byte, root, api_->comm_world),
          "MPI_Bcast");
  }
  return out;
}

}  // namespace rtd::mpi
