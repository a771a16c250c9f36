// MpiApi: the Open MPI entry points librt_dist calls, found at run time
// (dlopen of libmpi, RTLD_GLOBAL: its components are themselves loaded
// libraries that need its symbols), so that nothing links MPI and a process
// that dtrun started never loads it. In Open MPI's ABI every handle
// (MPI_Comm, MPI_Datatype, MPI_Op, MPI_Request, MPI_Errhandler) is a pointer,
// and the predefined ones are the addresses of globals (MPI_COMM_WORLD is
// &ompi_mpi_comm_world): they are looked up the same way.
#pragma once

#include <mutex>
#include <string>

namespace rtd::mpi {

// Open MPI's values of the constants used (mpi.h).
inline void* const kInPlace = reinterpret_cast<void*>(1);  // MPI_IN_PLACE
inline constexpr int kUndefined = -32766;                  // MPI_UNDEFINED
inline constexpr int kThreadSerialized = 2;                // MPI_THREAD_SERIALIZED
inline constexpr int kThreadMultiple = 3;                  // MPI_THREAD_MULTIPLE
inline constexpr int kMaxErrorString = 256;                // MPI_MAX_ERROR_STRING

struct MpiApi {
  using Handle = void*;
  int (*initialized)(int*) = nullptr;
  int (*finalized)(int*) = nullptr;
  int (*init_thread)(int*, char***, int, int*) = nullptr;
  int (*query_thread)(int*) = nullptr;
  int (*finalize)() = nullptr;
  int (*bcast)(void*, int, Handle, int, Handle) = nullptr;
  int (*comm_dup)(Handle, Handle*) = nullptr;
  int (*comm_split)(Handle, int, int, Handle*) = nullptr;
  int (*comm_free)(Handle*) = nullptr;
  int (*comm_rank)(Handle, int*) = nullptr;
  int (*comm_size)(Handle, int*) = nullptr;
  int (*comm_set_errhandler)(Handle, Handle) = nullptr;
  int (*iallreduce)(const void*, void*, int, Handle, Handle, Handle, Handle*) = nullptr;
  int (*ibcast)(void*, int, Handle, int, Handle, Handle*) = nullptr;
  int (*iallgather)(const void*, int, Handle, void*, int, Handle, Handle, Handle*) = nullptr;
  int (*ireduce_scatter_block)(const void*, void*, int, Handle, Handle, Handle, Handle*) = nullptr;
  int (*ialltoall)(const void*, int, Handle, void*, int, Handle, Handle, Handle*) = nullptr;
  int (*ibarrier)(Handle, Handle*) = nullptr;
  int (*isend)(const void*, int, Handle, int, int, Handle, Handle*) = nullptr;
  int (*irecv)(void*, int, Handle, int, int, Handle, Handle*) = nullptr;
  int (*test)(Handle*, int*, void*) = nullptr;
  int (*error_string)(int, char*, int*) = nullptr;
  int (*cuda_support)() = nullptr;  // MPIX_Query_cuda_support: absent before CUDA-aware builds

  Handle comm_world = nullptr, comm_null = nullptr, errors_return = nullptr;
  Handle byte = nullptr, f32 = nullptr, f64 = nullptr, i32 = nullptr, i64 = nullptr;
  Handle op_sum = nullptr, op_min = nullptr, op_max = nullptr;

  // "MPI_Xxx failed: <MPI's words>" for a return code other than MPI_SUCCESS.
  std::string describe(int rc, const char* call) const;
};

// The entry points, loaded once; throws rtd::Error(kConfig) naming what is
// missing (the library, an entry point).
const MpiApi& mpi_api();

// Where MPI was given less than MPI_THREAD_MULTIPLE, every call from
// librt_dist's threads holds this (MpiSession sets it up).
class MpiCallLock {
 public:
  MpiCallLock();
  ~MpiCallLock();
  MpiCallLock(const MpiCallLock&) = delete;
  MpiCallLock& operator=(const MpiCallLock&) = delete;
  static void set_needed(bool needed);

 private:
  bool held_;
};

}  // namespace rtd::mpi
