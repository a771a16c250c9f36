// Loading Open MPI's entry points (mpi_api.h).
#include "collectives/mpi/mpi_api.h"

#include <dlfcn.h>

#include <atomic>

#include "rt_dist/error.h"

namespace rtd::mpi {
namespace {

template <typename Fn>
void find(void* lib, const char* name, Fn* fn, std::string* missing) {
  *fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (!*fn && missing) *missing += std::string(missing->empty() ? "" : ", ") + name;
}

void find_handle(void* lib, const char* name, void** handle, std::string* missing) {
  *handle = dlsym(lib, name);
  if (!*handle) *missing += std::string(missing->empty() ? "" : ", ") + name;
}

std::mutex g_call_mu;
std::atomic<bool> g_lock_needed{true};

MpiApi load() {
  void* lib = nullptr;
  for (const char* name : {"libmpi.so.40", "libmpi.so"}) {
    if ((lib = dlopen(name, RTLD_NOW | RTLD_GLOBAL))) break;
  }
  if (!lib) {
    throw Error(ErrorCategory::kConfig, "Open MPI's libmpi.so.40 cannot be loaded (" +
                                            std::string(dlerror()) +
                                            "); install Open MPI, or start the job with dtrun");
  }
  MpiApi a;
  std::string missing;
  find(lib, "MPI_Initialized", &a.initialized, &missing);
  find(lib, "MPI_Finalized", &a.finalized, &missing);
  find(lib, "MPI_Init_thread", &a.init_thread, &missing);
  find(lib, "MPI_Query_thread", &a.query_thread, &missing);
  find(lib, "MPI_Finalize", &a.finalize, &missing);
  find(lib, "MPI_Bcast", &a.bcast, &missing);
  find(lib, "MPI_Comm_dup", &a.comm_dup, &missing);
  find(lib, "MPI_Comm_split", &a.comm_split, &missing);
  find(lib, "MPI_Comm_free", &a.comm_free, &missing);
  find(lib, "MPI_Comm_rank", &a.comm_rank, &missing);
  find(lib, "MPI_Comm_size", &a.comm_size, &missing);
  find(lib, "MPI_Comm_set_errhandler", &a.comm_set_errhandler, &missing);
  find(lib, "MPI_Iallreduce", &a.iallreduce, &missing);
  find(lib, "MPI_Ibcast", &a.ibcast, &missing);
  find(lib, "MPI_Iallgather", &a.iallgather, &missing);
  find(lib, "MPI_Ireduce_scatter_block", &a.ireduce_scatter_block, &missing);
  find(lib, "MPI_Ialltoall", &a.ialltoall, &missing);
  find(lib, "MPI_Ibarrier", &a.ibarrier, &missing);
  find(lib, "MPI_Isend", &a.isend, &missing);
  find(lib, "MPI_Irecv", &a.irecv, &missing);
  find(lib, "MPI_Test", &a.test, &missing);
  find(lib, "MPI_Error_string", &a.error_string, &missing);
  find(lib, "MPIX_Query_cuda_support", &a.cuda_support, nullptr);
  find_handle(lib, "ompi_mpi_comm_world", &a.comm_world, &missing);
  find_handle(lib, "ompi_mpi_comm_null", &a.comm_null, &missing);
  find_handle(lib, "ompi_mpi_errors_return", &a.errors_return, &missing);
  find_handle(lib, "ompi_mpi_byte", &a.byte, &missing);
  find_handle(lib, "ompi_mpi_float", &a.f32, &missing);
  find_handle(lib, "ompi_mpi_double", &a.f64, &missing);
  find_handle(lib, "ompi_mpi_int32_t", &a.i32, &missing);
  find_handle(lib, "ompi_mpi_int64_t", &a.i64, &missing);
  find_handle(lib, "ompi_mpi_op_sum", &a.op_sum, &missing);
  find_handle(lib, "ompi_mpi_op_min", &a.op_min, &missing);
  find_handle(lib, "ompi_mpi_op_max", &a.op_max, &missing);
  if (!missing.empty()) {
    throw Error(
        ErrorCategory::kConfig,
        "the loaded libmpi is not Open MPI's, or too old (MPI 3 is needed): missing " + missing);
  }
  return a;
}

}  // namespace

std::string MpiApi::describe(int rc, const char* call) const {
  char text[kMaxErrorString] = {};
  int length = 0;
  std::string words = error_string && error_string(rc, text, &length) == 0
                          ? std::string(text, static_cast<std::size_t>(length))
                          : "error " + std::to_string(rc);
  return std::string(call) + " failed: " + words;
}

const MpiApi& mpi_api() {
  static const MpiApi api = load();
  return api;
}

MpiCallLock::MpiCallLock() : held_(g_lock_needed.load()) {
  if (held_) g_call_mu.lock();
}

MpiCallLock::~MpiCallLock() {
  if (held_) g_call_mu.unlock();
}

void MpiCallLock::set_needed(bool needed) { g_lock_needed = needed; }

}  // namespace rtd::mpi
