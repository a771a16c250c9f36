/* rt_dist/c_api.h: a small C interface to librt_dist's communicators, for
 * callers that are not C++ (the PyTorch backend in python/rt_dist/torch
 * calls it through ctypes, so that no one compiles anything against torch).
 *
 * Every function that can fail returns NULL (or a nonzero int) and leaves a
 * message for rtd_last_error() on the calling thread. Nothing here exits or
 * prints. A communicator is used by one thread at a time, as in C++.
 *
 * Buffers: `data` is a host pointer (device < 0) or a pointer into GPU
 * `device`'s memory. Streams: a CUDA stream handle (NULL: the legacy default
 * stream); a GPU operation is ordered after the work already queued on it,
 * and rtd_work_wait_stream orders a stream after the operation, neither
 * blocking the host (see [Stream order] in work.h). CPU operations ignore it.
 */
#ifndef RT_DIST_C_API_H_
#define RT_DIST_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Raised whenever a signature below changes; the caller checks it first. */
#define RTD_C_API_VERSION 10
int rtd_c_api_version(void);

/* The message of the last failure on this thread ("" if none). */
const char* rtd_last_error(void);
/* Its category: 0 none, 1 invalid argument, 2 configuration, 3 network,
 * 4 timeout, 5 backend, 6 internal (rtd::ErrorCategory's order, plus one). */
int rtd_last_error_category(void);

/* dtypes and ops as rtd::DType and rtd::ReduceOp number them. */
enum { RTD_FLOAT32 = 0, RTD_FLOAT64, RTD_INT32, RTD_INT64, RTD_BFLOAT16, RTD_FLOAT16 };
enum { RTD_SUM = 0, RTD_AVG, RTD_MIN, RTD_MAX };

/* The store a communicator bootstraps through, as callbacks into the caller
 * (the PyTorch backend passes torch's own store). Each returns 0 on success.
 * get waits up to timeout_ms for the key and hands the value to
 * rtd_store_reply(reply, ...); check answers whether the key exists. */
typedef struct rtd_store_ops {
  void* self;
  int (*set)(void* self, const char* key, const void* value, size_t len);
  int (*get)(void* self, const char* key, int64_t timeout_ms, void* reply);
  int (*add)(void* self, const char* key, int64_t delta, int64_t* result);
  int (*check)(void* self, const char* key, int* exists);
  int (*remove)(void* self, const char* key);
} rtd_store_ops;
void rtd_store_reply(void* reply, const void* data, size_t len);

typedef struct rtd_comm rtd_comm;
typedef struct rtd_work rtd_work;

/* Collective over `size` ranks: backend "gloo" (host memory; `host` is the
 * address this rank listens on) or "nccl" (GPU `device`). `name` appears in
 * messages. copy_engines: NCCL within one host, all-reduces of sums and
 * averages of float types by copy engines, staged through buffers that are
 * mapped once (every rank the same value; see docs/torch.md). The
 * store is used during this call and by the hang diagnosis later: `ops` must
 * stay valid until rtd_comm_destroy. */
rtd_comm* rtd_comm_create(const rtd_store_ops* ops, const char* backend, const char* name, int rank,
                          int size, int device, const char* host, int64_t timeout_ms,
                          int copy_engines);
/* rtd_comm_create with more choices; options NULL: rtd_comm_create's
 * defaults (copy_engines 0). inline_bytes: NCCL collectives of at most this
 * many bytes run on the caller's stream itself (0: none; -1: the process's
 * RTD_NCCL_INLINE_BYTES). stream_priority: the NCCL communicator's stream at
 * the device's highest priority (1) or the default one (0); -1: highest. */
typedef struct rtd_comm_options {
  int copy_engines;
  int64_t inline_bytes;
  int stream_priority;
} rtd_comm_options;
rtd_comm* rtd_comm_create_with(const rtd_store_ops* ops, const char* backend, const char* name,
                               int rank, int size, int device, const char* host, int64_t timeout_ms,
                               const rtd_comm_options* options);
/* Frees it (NCCL: finishes or, past the timeout, aborts what is queued). */
void rtd_comm_destroy(rtd_comm* comm);
void rtd_comm_abort(rtd_comm* comm);
/* 1 once the communicator can no longer be used (an asynchronous NCCL error,
 * an operation past its timeout, an abort), with why in rtd_last_error();
 * 0 while it can. Gloo answers 0: its Works carry their failures. */
int rtd_comm_failed(rtd_comm* comm);
/* Runs fn(arg) once, on a thread of the communicator's own, when it has
 * failed (when rtd_comm_failed would answer 1), so that a caller need not
 * ask. fn NULL: none. Returns after a running call of the previous fn
 * returned: fn must not call this. Gloo never runs it (see rtd_comm_failed). */
void rtd_comm_on_failure(rtd_comm* comm, void (*fn)(void* arg), void* arg);
/* The CUDA stream on which its operations read and write the caller's
 * buffers (NULL for Gloo): see Communicator::stream(). */
void* rtd_comm_stream(rtd_comm* comm);

rtd_work* rtd_all_reduce(rtd_comm* comm, void* in, void* out, int64_t count, int dtype, int op,
                         int device, void* stream);
rtd_work* rtd_broadcast(rtd_comm* comm, void* buf, int64_t count, int dtype, int root, int device,
                        void* stream);
/* count: elements of `in`; out holds count * size. */
rtd_work* rtd_all_gather(rtd_comm* comm, void* in, void* out, int64_t count, int dtype, int device,
                         void* stream);
/* count: elements of `out`; in holds count * size. */
rtd_work* rtd_reduce_scatter(rtd_comm* comm, void* in, void* out, int64_t count, int dtype, int op,
                             int device, void* stream);
/* count: elements of in and of out, divisible by size. */
rtd_work* rtd_all_to_all(rtd_comm* comm, void* in, void* out, int64_t count, int dtype, int device,
                         void* stream);
rtd_work* rtd_barrier(rtd_comm* comm, void* stream);
/* Point-to-point, not collective: the peer posts the matching call, same tag.
 * rtd_recv's peer -1 (host memory, Gloo): from whichever other rank sends
 * first; rtd_work_source names it once the Work is done. */
rtd_work* rtd_send(rtd_comm* comm, void* buf, int64_t count, int dtype, int peer, int tag,
                   int device, void* stream);
rtd_work* rtd_recv(rtd_comm* comm, void* buf, int64_t count, int dtype, int peer, int tag,
                   int device, void* stream);

/* Several operations as one group (NCCL: one ncclGroupStart/End), returning
 * one Work: coalesced collectives, and all-to-all with uneven splits as sends
 * and receives. kind: RTD_OP_* below; count and dtype as the single calls. */
enum {
  RTD_OP_ALL_REDUCE = 0,
  RTD_OP_BROADCAST,
  RTD_OP_ALL_GATHER,
  RTD_OP_REDUCE_SCATTER,
  RTD_OP_SEND,
  RTD_OP_RECV
};
typedef struct rtd_op {
  int kind;
  void* in;
  void* out;
  int64_t count;
  int dtype;
  int op;   /* reductions */
  int peer; /* broadcast: the root; send/recv: the peer */
} rtd_op;
rtd_work* rtd_group(rtd_comm* comm, const rtd_op* ops, int n, int device, void* stream);

/* 1 once finished (successfully or not), 0 while running. */
int rtd_work_done(rtd_work* work);
/* Blocks up to timeout_ms (< 0: the communicator's timeout); 0 on success. */
int rtd_work_wait(rtd_work* work, int64_t timeout_ms);
/* Orders `stream` after the operation; never blocks the host. 0 on success. */
int rtd_work_wait_stream(rtd_work* work, void* stream);
/* 0 while running or on success, else 1 with the message in rtd_last_error(). */
int rtd_work_error(rtd_work* work);
/* A receive from any source, once done: the rank it came from; else -1. */
int rtd_work_source(rtd_work* work);
void rtd_work_free(rtd_work* work);

/* One buffer reduced in place many times, as a DDP bucket is
 * (PersistentAllReduce): collective, every rank the same count, dtype, op
 * and copy_engines. With NCCL and every rank on one host with peer access,
 * the peers map the buffer once and copy engines move the data (copy_engines
 * 1); else each run is an all_reduce. The buffer must outlive it, and it
 * must be freed before its communicator. NULL on failure. */
typedef struct rtd_persistent rtd_persistent;
rtd_persistent* rtd_persistent_all_reduce(rtd_comm* comm, void* buf, int64_t count, int dtype,
                                          int op, int device, int copy_engines);
/* Reduces the buffer, ordered after `stream` as the other calls are. */
rtd_work* rtd_persistent_run(rtd_persistent* reduce, void* stream);
/* How runs move the data: "copy engines", "all_reduce", "all_gather" or
 * "reduce_scatter". */
const char* rtd_persistent_method(rtd_persistent* reduce);
void rtd_persistent_free(rtd_persistent* reduce);

/* All-gathers or reduce-scatters out of one buffer fixed once, as a sharded
 * model's steps run them (PersistentShardCollective): collective, every rank
 * the same count, dtype (and op) and copy_engines. An all-gather's buffer is
 * its output, gathered in place (each rank's input is its block of it); a
 * reduce-scatter's is its input. With NCCL and every rank on one host with
 * peer access, the peers map the buffer once and copy engines move the data
 * with no staging copy; else each run is an all_gather or reduce_scatter. */
rtd_persistent* rtd_persistent_all_gather(rtd_comm* comm, void* buf, int64_t count, int dtype,
                                          int device, int copy_engines);
rtd_persistent* rtd_persistent_reduce_scatter(rtd_comm* comm, void* buf, int64_t count, int dtype,
                                              int op, int device, int copy_engines);
/* all_gather(in, out) or reduce_scatter(in, out) of `count` elements a rank
 * (an all-gather's in: its block of out; a reduce-scatter's out: anywhere),
 * in the buffer set up; ordered after `stream`. rtd_persistent_run is for
 * all-reduces only. */
rtd_work* rtd_persistent_shard_run(rtd_persistent* shard, void* in, void* out, int64_t count,
                                   void* stream);
/* An all-gather set up above, landing each rank's block of the buffer in
 * n_outs outputs instead of the buffer itself (PersistentShardCollective::
 * gather_blocks): the block is the outputs' shares (counts[k] / size elements
 * each) end to end; rank p's share k lands at outs[k] + p * counts[k] / size.
 * Collective: every rank the same counts. rtd_persistent_gathers_blocks says
 * whether the set-up can (host memory, or copy engines); 0 also for a
 * reduce-scatter or NULL. */
int rtd_persistent_gathers_blocks(rtd_persistent* shard);
/* 1 while this rank's source of a persistent all-gather or reduce-scatter is
 * the memory it was set up on; 0 once it was freed and allocated again (a
 * caching allocator's block, perhaps at the same address) where peers mapped
 * it: set up afresh, on every rank. Local. 1 for anything else. */
int rtd_persistent_sources_unchanged(rtd_persistent* shard);
rtd_work* rtd_persistent_gather_blocks(rtd_persistent* shard, void* const* outs,
                                       const int64_t* counts, int n_outs, void* stream);

/* The host AdamW (the one rtd::FSDP's offload steps with: AVX-512 or AVX2
 * where the CPU has them, a team of threads kept across steps, denormals
 * treated as zero), for optimizers in other languages (rt_dist.torch's
 * HostAdamW). One tensor's step, in host memory:
 *   g = grad * grad_scale            (grad_scale -1: maximize)
 *   exp_avg    = beta1 * exp_avg    + (1 - beta1) * g
 *   exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g * g
 *   param = param * (1 - lr * weight_decay)
 *           - lr * (exp_avg / (1 - beta1^step)) / (sqrt(exp_avg_sq / (1 - beta2^step)) + eps)
 * param, exp_avg and exp_avg_sq float32; grad RTD_FLOAT32 or RTD_BFLOAT16;
 * `count` elements each, none overlapping another's. */
typedef struct rtd_adamw_tensor {
  float* param;
  const void* grad;
  int grad_dtype;
  float* exp_avg;
  float* exp_avg_sq;
  int64_t count;
  int64_t step; /* 1-based: this step's number, for the bias corrections */
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
} rtd_adamw_tensor;
typedef struct rtd_host_adamw rtd_host_adamw;
/* threads >= 1: the caller's and threads - 1 helpers. NULL on failure. */
rtd_host_adamw* rtd_host_adamw_create(int threads);
/* Steps the n tensors, one after the other, each spread over the team.
 * Every tensor is checked before any is stepped: nonzero and nothing
 * changed when one is malformed. One call at a time per optimizer. */
int rtd_host_adamw_step(rtd_host_adamw* opt, const rtd_adamw_tensor* tensors, int64_t n);
/* The kernel it runs: "avx512", "avx2" or "scalar". */
const char* rtd_host_adamw_kernel(rtd_host_adamw* opt);
void rtd_host_adamw_destroy(rtd_host_adamw* opt);

/* Checkpoints (rt_dist/checkpoint.h, docs/checkpoints.md): a collective save
 * of every rank's element ranges into one directory per step, with a
 * manifest, CRC-32C per piece and an atomic commit, and a load of any ranges
 * on any number of ranks. The ranks agree through the store: `ops` must stay
 * valid until rtd_ckpt_destroy, and one rtd_ckpt per directory per store.
 * A range is elements [first, first + count) of the flattened tensor, at
 * `data`: host memory (device < 0) or GPU `device`'s, whose writes have
 * finished. dtype: RTD_FLOAT32 ... RTD_FLOAT16. */
typedef struct rtd_ckpt_range {
  int64_t first;
  int64_t count;
  void* data;
  int device;
} rtd_ckpt_range;
typedef struct rtd_ckpt_tensor {
  const char* name;
  int dtype;
  int ndim;
  const int64_t* shape; /* global; the same on every rank */
  int64_t n_ranges;
  const rtd_ckpt_range* ranges; /* this rank's part (may be none) */
} rtd_ckpt_tensor;
typedef struct rtd_ckpt_options {
  const char* dir;
  int keep_last;       /* 0: keep all */
  int io_threads;      /* >= 1 */
  int64_t piece_bytes; /* >= 1 */
} rtd_ckpt_options;
typedef struct rtd_ckpt rtd_ckpt;
rtd_ckpt* rtd_ckpt_create(const rtd_store_ops* ops, int rank, int size,
                          const rtd_ckpt_options* options);
/* Collective: writes the tensors' ranges and meta (n_meta pairs: meta[2i] the
 * key, meta[2i+1] its value, UTF-8 text; rank 0's are kept) as `step` and
 * returns once it is committed. Nonzero on any rank's failure, on every rank. */
int rtd_ckpt_save(rtd_ckpt* ckpt, int64_t step, const rtd_ckpt_tensor* tensors, int64_t n,
                  const char* const* meta, int64_t n_meta);
/* Collective: fills every range from the newest checkpoint of a step <=
 * `newest` (-1: any) that every rank can read and check; with fallback, one
 * that fails is skipped for the one before. *step: the step loaded, -1 when
 * there is none. Each of its meta entries is handed to on_meta (may be
 * NULL) before it returns. */
int rtd_ckpt_load(rtd_ckpt* ckpt, const rtd_ckpt_tensor* tensors, int64_t n, int64_t newest,
                  int fallback, int64_t* step,
                  void (*on_meta)(void* arg, const char* key, const char* value), void* arg);
/* Waits for what the checkpointer does in the background, then frees it. */
void rtd_ckpt_destroy(rtd_ckpt* ckpt);
/* The manifest (JSON, as on disk) of the newest checkpoint in dir of a step
 * <= newest (-1: any) whose manifest reads and checks, and its step; NULL
 * with an error naming each one tried when none does, or none is there.
 * Free it with rtd_free. */
char* rtd_ckpt_read_manifest(const char* dir, int64_t newest, int64_t* step);
void rtd_free(void* p);

/* The job's store: dtrun's (DTRUN_STORE, with DTRUN_TOKEN and the TLS files
 * of DTRUN_TLS_*), under the prefix of the worker's round, as librt_dist's
 * own contexts see it. It outlives any rank: what a caller keeps across a
 * lost worker goes there (rt_dist.torch's in-process recovery). NULL, with
 * the reason, when the process was not started by dtrun. A handle may be
 * used from any thread. */
typedef struct rtd_job_store rtd_job_store;
rtd_job_store* rtd_job_store_open(void);
int rtd_job_store_set(rtd_job_store* store, const char* key, const void* value, size_t len);
/* Waits up to timeout_ms (0: not at all) for the key; *value (free it with
 * rtd_free) and *len its bytes. Nonzero when it is not there in time (a
 * timeout, category 4) or the store cannot be reached. */
int rtd_job_store_get(rtd_job_store* store, const char* key, int64_t timeout_ms, void** value,
                      size_t* len);
int rtd_job_store_add(rtd_job_store* store, const char* key, int64_t delta, int64_t* result);
int rtd_job_store_check(rtd_job_store* store, const char* key, int* exists);
int rtd_job_store_remove(rtd_job_store* store, const char* key, int* removed);
void rtd_job_store_close(rtd_job_store* store);
/* What dtrun told this worker (librt_dist's configuration, read once): its
 * place, its round and generation, and in-process recovery's settings. */
typedef struct rtd_job_info {
  int rank, world_size, round, generation;
  int recovery; /* 1: DTRUN_RECOVERY=in-process */
  int joining;  /* 1: DTRUN_RECOVERY_JOIN (a worker of a node that joined) */
  int64_t recovery_wait_ms, timeout_ms;
} rtd_job_info;
int rtd_job_info_read(rtd_job_info* info);

#ifdef __cplusplus
}
#endif

#endif /* RT_DIST_C_API_H_ */
