/* mpigpu_cuda.h: the plain C ABI between the CUDA layer (cuda/) and the Cython layer (mpigpu/_ext/).
 *
 * Only pointers, sizes, enums and error codes cross this line. Every function returns 0 on success,
 * a positive cudaError_t value when the CUDA runtime failed, or a negative MG_ERR_* code; the text
 * of either comes from mg_error_string(). Nothing here allocates per collective or prints; MPI is
 * called only by the request completion below, through function pointers the caller resolved.
 */
#ifndef MPIGPU_CUDA_H
#define MPIGPU_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MG_MAX_RANKS 8      /* ranks of one node that one device team can hold */
#define MG_MAX_CHANNELS 128 /* thread blocks (channels) one collective may use */
#define MG_IPC_HANDLE_BYTES 64
#define MG_LL_MAX_BYTES (64 * 1024)  /* largest per-peer piece of the low-latency protocol */
#define MG_EXCHANGE_LL_MAX_BYTES (16 * 1024) /* largest pair the exchange moves in the low-latency format */
#define MG_LL128_LIMIT_BYTES (1u << 30) /* most a team may set as ll128_bytes */

/* The codes shared with Python, each written once as an X-macro table: the enums below and the name
 * functions after them are expanded from these, and mpigpu/_ext/_codes.pyx reads the names, so Python
 * knows every code by name (mpigpu/_base/codes.py) without a second table. */

/* Element types: X(NAME, name, bytes, C alignment, kind). kind: 'b' bool, 'i' signed, 'u' unsigned,
 * 'f' IEEE float, 'B' bfloat16, 'c' complex (aligned like its component). */
#define MG_DTYPES(X)                                                                                 \
  X(BOOL, bool, 1, 1, 'b') X(INT8, int8, 1, 1, 'i') X(UINT8, uint8, 1, 1, 'u')                       \
  X(INT16, int16, 2, 2, 'i') X(UINT16, uint16, 2, 2, 'u') X(INT32, int32, 4, 4, 'i')                 \
  X(UINT32, uint32, 4, 4, 'u') X(INT64, int64, 8, 8, 'i') X(UINT64, uint64, 8, 8, 'u')               \
  X(FLOAT16, float16, 2, 2, 'f') X(BFLOAT16, bfloat16, 2, 2, 'B') X(FLOAT32, float32, 4, 4, 'f')     \
  X(FLOAT64, float64, 8, 8, 'f') X(COMPLEX64, complex64, 8, 4, 'c') X(COMPLEX128, complex128, 16, 8, 'c')

/* Reduction operators, named as MPI names them (MPI.SUM ...). */
#define MG_OPS(X) X(SUM) X(PROD) X(MAX) X(MIN) X(LAND) X(LOR) X(LXOR) X(BAND) X(BOR) X(BXOR)

/* The collectives that run GPU to GPU, named as MPI names them (MPI_Allreduce ...): the engine's five
 * (mg_collective, up to MG_LAST_ENGINE_COLL), then the all-to-all family on the exchange transport
 * (mg_exchange: Python turns each call into per-peer byte ranges), then the reductions that gather
 * their blocks over the exchange and reduce them on the GPU (mg_exchange, then mg_reduce_rows). Their
 * codes also name a call on the placement board (mpigpu/_ext/board.h), where the ranks of every such
 * call agree on its path. */
#define MG_COLLS(X) X(ALLREDUCE) X(BCAST) X(REDUCE_SCATTER_BLOCK) X(REDUCE) X(ALLGATHER) \
  X(ALLTOALL) X(ALLTOALLV) X(ALLGATHERV) X(GATHER) X(GATHERV) X(SCATTER) X(SCATTERV) X(ALLTOALLW) \
  X(NEIGHBOR_ALLGATHER) X(NEIGHBOR_ALLGATHERV) X(NEIGHBOR_ALLTOALL) X(NEIGHBOR_ALLTOALLV) X(NEIGHBOR_ALLTOALLW) \
  X(REDUCE_SCATTER) X(SCAN) X(EXSCAN)
#define MG_LAST_ENGINE_COLL MG_ALLGATHER

/* Algorithms. AUTO lets the cost model (mg_select) choose. Python's knob names are these in lower
 * case with '-' for '_' (MPIGPU_ALGO=ll128-twoshot).
 * ONESHOT: every owner receives every contribution whole: one hop, (n-1)x bytes per rank.
 * TWOSHOT: shards: reduce-scatter by push, then push the reduced shards: 2 hops, 2(n-1)/n bytes.
 * LL: low-latency one-shot (data and flag in each 8 bytes): small symmetric calls.
 * LL128: 128-byte lines (120 bytes of data and a flag): one-shot, small and medium calls.
 * LL128_TWOSHOT: in 128-byte lines, two phases: Allreduce as reduce-scatter then all-gather; Bcast as
 *   scatter from the root then all-gather among the others.
 * RING: ring (Allreduce, Reduce_scatter_block, Allgather) and pipelined chain (Bcast, Reduce): each
 *   rank stores only to the next one. */
#define MG_ALGOS(X) X(AUTO) X(ONESHOT) X(TWOSHOT) X(LL) X(LL128) X(LL128_TWOSHOT) X(RING)

#define MG_DTYPE_ENUM_(NAME, name, size, align, kind) MG_##NAME,
#define MG_PLAIN_ENUM_(NAME) MG_##NAME,
#define MG_ALGO_ENUM_(NAME) MG_ALGO_##NAME,
enum mg_dtype { MG_DTYPES(MG_DTYPE_ENUM_) MG_NDTYPES };
enum mg_op { MG_OPS(MG_PLAIN_ENUM_) MG_NOPS };
enum mg_coll { MG_COLLS(MG_PLAIN_ENUM_) MG_NCOLLS };
enum mg_algo { MG_ALGOS(MG_ALGO_ENUM_) MG_NALGOS };

typedef struct mg_dtype_info {
  const char *name;
  int size, align;
  char kind;
} mg_dtype_info;

/* The element type table, indexed by enum mg_dtype. */
static inline const mg_dtype_info *mg_dtype_table(void) {
#define MG_DTYPE_ROW_(NAME, name, size, align, kind) {#name, size, align, kind},
  static const mg_dtype_info table[MG_NDTYPES] = {MG_DTYPES(MG_DTYPE_ROW_)};
#undef MG_DTYPE_ROW_
  return table;
}

#define MG_NAME_ROW_(NAME) #NAME,
/* Names of the op, collective and algorithm codes ("SUM", "REDUCE_SCATTER_BLOCK", "LL128_TWOSHOT"). */
static inline const char *mg_op_name(int op) {
  static const char *names[MG_NOPS] = {MG_OPS(MG_NAME_ROW_)};
  return op >= 0 && op < MG_NOPS ? names[op] : 0;
}
static inline const char *mg_coll_name(int coll) {
  static const char *names[MG_NCOLLS] = {MG_COLLS(MG_NAME_ROW_)};
  return coll >= 0 && coll < MG_NCOLLS ? names[coll] : 0;
}
static inline const char *mg_algo_name(int algo) {
  static const char *names[MG_NALGOS] = {MG_ALGOS(MG_NAME_ROW_)};
  return algo >= 0 && algo < MG_NALGOS ? names[algo] : 0;
}
#undef MG_NAME_ROW_

enum mg_err {
  MG_OK = 0,
  MG_ERR_UNSUPPORTED = -1, /* type/op pair the engine does not implement */
  MG_ERR_ARG = -2,         /* bad argument (rank, count, root, sizes) */
  MG_ERR_TEAM = -3,        /* team not complete (a peer workspace not opened) */
  MG_ERR_NOMEM = -4,
  MG_ERR_BUSY = -5,        /* every request slot is in use */
  MG_ERR_MPI = -6,         /* an MPI function called through mg_mpi_api failed */
  MG_ERR_THREAD = -7,      /* the completion watcher thread could not start */
  /* Faults (the call's kernel stopped and returned; the process and its other teams are unharmed):
   * the first cause, whether this rank's wait or host gave up or a peer's did (mg_team_fault) */
  MG_ERR_TIMEOUT = -8,     /* a kernel waited longer than timeout_s for a peer */
  MG_ERR_ABORTED = -9,     /* mg_team_abort stopped the call */
  MG_ERR_BROKEN = -10,     /* an earlier call of the team faulted or it was aborted: no call runs on it */
  MG_ERR_DECLINED = -11    /* the call's gate declined it (mg_collective_wait_gated): nothing ran */
};

const char *mg_error_string(int err);

/* ---- runtime (runtime.cu) ---- */
int mg_device_count(int *count);
int mg_get_device(int *device);
int mg_set_device(int device);
/* memtype: 0 unregistered host, 1 pinned host, 2 device, 3 managed (the runtime's view: needs a context) */
int mg_pointer_info(uintptr_t ptr, int *memtype, int *device);
/* Where a pointer lives, asked of the driver without creating a context (a host program's buffers
 * must not cost it one): host memory (also pinned, or with no driver), device memory, managed memory;
 * device: the GPU's ordinal, -1 for host memory. */
enum mg_memory { MG_MEMORY_HOST = 0, MG_MEMORY_DEVICE, MG_MEMORY_MANAGED };
int mg_pointer_kind(uintptr_t ptr, int *kind, int *device);
int mg_pci_bus_id(int device, char *buf, int len);
int mg_device_by_pci_bus_id(const char *bus_id, int *device);
int mg_can_access_peer(int device, int peer, int *can);
int mg_device_alloc(size_t bytes, uintptr_t *ptr); /* on the current device (scratch of packed datatypes
                                                      and of the hierarchical path) */
int mg_device_free(uintptr_t ptr);
int mg_host_alloc(size_t bytes, uintptr_t *ptr); /* pinned, portable, mapped (kernels use its host address) */
int mg_host_free(uintptr_t ptr);
int mg_stream_create(uintptr_t *stream);          /* non-blocking stream on the current device */
int mg_stream_destroy(uintptr_t stream);
int mg_stream_sync(uintptr_t stream);
/* *idle = 1 when `stream` has nothing left to run (a query: never blocks) */
int mg_stream_idle(uintptr_t stream, int *idle);
int mg_event_create(uintptr_t *event);            /* timing disabled */
int mg_event_destroy(uintptr_t event);
int mg_event_record(uintptr_t event, uintptr_t stream);
int mg_event_sync(uintptr_t event);
int mg_stream_wait_event(uintptr_t stream, uintptr_t event);
int mg_memcpy_async(uintptr_t dst, uintptr_t src, size_t bytes, uintptr_t stream);

/* ---- the host's side of a stream (host_wait.cu) ---- */
/* Enqueues on stream a wait until the 32-bit word at words[0] (pinned host memory) reaches value (a
 * wrapping sequence); after timeout_s (0: never) the wait ends and value is written to words[1]. */
int mg_stream_wait_host(uintptr_t stream, uintptr_t words, uint32_t value, double timeout_s);
/* capturing = 1 while stream is being captured into a CUDA graph. */
int mg_stream_capturing(uintptr_t stream, int *capturing);
/* ---- recorded calls (graph.cu) ---- */
/* A capture of what is enqueued on `stream` (and on the streams that join it through events) begins;
 * relaxed: other threads' CUDA calls stay legal meanwhile. */
int mg_capture_begin(uintptr_t stream);
/* The capture ends and is made launchable (*graph: an executable graph, 0 when none was made). */
int mg_capture_end(uintptr_t stream, uintptr_t *graph);
int mg_graph_launch(uintptr_t graph, uintptr_t stream);
int mg_graph_destroy(uintptr_t graph);
/* Loads every kernel the hierarchical path may launch while a stream waits for the host (kernel_load.cu:
 * a lazily loaded kernel's first launch may synchronize the context, which would wait for that stream). */
int mg_load_kernels(void);

/* ---- reduction of rows (reduce_rows.cu) ---- */
/* dst[i] = src row 0 [i] op row 1 [i] op ... (nrows rows of count elements, row_bytes apart, in row order),
 * enqueued on stream; dst and src in device memory or pinned host memory. */
int mg_reduce_rows(int dtype, int op, uintptr_t dst, uintptr_t src, size_t row_bytes, int nrows, size_t count,
                   uintptr_t stream);

/* ---- device team (transport_ipc.cu) ---- */
typedef struct mg_team mg_team;

/* The exchange's receivers in a launched kernel (exchange_kernel.cuh): one peer's share after another
 * (in the channel's rounds, mg_exchange_rounds), step by step from whichever peer's next step has arrived, or the second where
 * the rank only receives and some peer's share on the channel takes two steps or more (a rooted
 * gather: its peers' shares arrive at once), else the first. */
enum mg_exchange_drain { MG_DRAIN_ROUNDS = 0, MG_DRAIN_ARRIVAL, MG_DRAIN_AUTO };
/* Which end of an exchange connection holds its FIFO slots: the receiver (the sender writes across the
 * link), the sender (it fills them locally and the receiver reads across the link), or by the call
 * (mg_exchange_call::coll): the sender for the fan-out calls, Scatter(v) and the neighbourhood
 * collectives, the receiver for the others. */
enum mg_exchange_slots { MG_SLOTS_AT_RECEIVER = 0, MG_SLOTS_AT_SENDER, MG_SLOTS_BY_CALL };
/* The order of an exchange channel's rounds (round i: send to rank me + i, receive from me - i): the
 * same on every channel, or rotated by the channel, so a rank's channels keep all its peers' links
 * busy at once (exchange_round_peer). The same on every rank. */
enum mg_exchange_rounds { MG_ROUNDS_ALIGNED = 0, MG_ROUNDS_STAGGERED };

typedef struct mg_team_config {
  int rank, nranks, device;
  size_t slot_bytes;   /* bytes of one FIFO slot (the pipeline chunk) */
  int nslots;          /* FIFO depth per connection */
  int max_channels;    /* channels the workspace is laid out for */
  int split_steps;     /* direct kernel: from this many steps per channel, stages on separate warps (0: never) */
  size_t ll128_bytes;  /* largest per-peer piece of the 128-byte-line protocol (sizes its areas; 0: no LL128) */
  double timeout_s;    /* a kernel waiting longer than this for a peer stops: the call ends with MG_ERR_TIMEOUT */
  double resident_us;  /* blocking LL and LL128 calls run in a kernel that stays running between them
                          (resident_kernel.cuh): after each call twice the recent gaps between calls, at
                          most this long; a call after a longer gap launches (resident.cu); 0: every
                          call is launched */
  int resident_blocks;       /* that kernel's blocks (1 .. MG_MAX_CHANNELS) */
  size_t resident_max_bytes; /* largest LL128 message it runs (LL calls: all); 0: LL calls only */
  size_t resident_copy_max_bytes; /* a one-rank team: the largest copy it runs (resident_copy_kernel) */
  size_t exchange_channel_bytes;  /* the exchange: a pair's bytes per channel before it takes another
                                     (the same on every rank: both ends of a pair count its channels) */
  size_t exchange_ll_bytes;       /* the exchange: pairs of at most this many bytes move in the
                                     low-latency format (0 .. MG_EXCHANGE_LL_MAX_BYTES; the same on
                                     every rank: both ends of a pair pick its format) */
  int exchange_drain;             /* enum mg_exchange_drain: how the exchange's launched kernels drain
                                     a call's FIFO pairs (a rank's own choice: no send waits on it) */
  int exchange_slots;             /* enum mg_exchange_slots: which end of a connection holds its FIFO
                                     slots; the same on every rank */
  int exchange_rounds;            /* enum mg_exchange_rounds: the channels' round order; the same on
                                     every rank */
} mg_team_config;

int mg_team_create(const mg_team_config *cfg, mg_team **team);
int mg_team_export(mg_team *team, void *handle /* MG_IPC_HANDLE_BYTES */);
int mg_team_open_peer(mg_team *team, int peer, const void *handle);
int mg_team_destroy(mg_team *team);
size_t mg_team_workspace_bytes(const mg_team *team);

/* ---- faults (fault.cu) ----
 * A kernel waiting for a peer stops when timeout_s passes, when mg_team_abort is called, or when a
 * peer's kernel stopped first; the call still ends on every rank, and returns (or completes its
 * request with) MG_ERR_TIMEOUT or MG_ERR_ABORTED. The team is then broken: every later call returns
 * MG_ERR_BROKEN at once, and mg_team_destroy works as usual. */
/* Stops every kernel of the team, running or queued, here and at the peers (whose calls end too);
 * from any thread (not during mg_team_destroy); returns at once. */
int mg_team_abort(mg_team *team);
/* The team's fault: code 0, or MG_ERR_TIMEOUT / MG_ERR_ABORTED, and the rank whose kernel or host
 * gave up first (-1: none). Also sees a fault a peer marked while this rank ran no call (a copy from
 * the device and a wait: not for a collective's path). */
int mg_team_fault(mg_team *team, int *code, int *origin);
/* After a fault: the peers (bit k: rank k) that never began the call that faulted here. */
int mg_team_missing_peers(mg_team *team, uint32_t *mask);
/* Since the team was created: blocking calls the resident kernel ran, instances of it launched, and
 * calls that could have run resident but launched because they came alone (after a gap longer than
 * resident_us since the team's last such call). */
void mg_team_resident_stats(const mg_team *team, uint64_t *calls, uint64_t *launches, uint64_t *alone);

/* ---- collectives (collectives.cu) ---- */
typedef struct mg_call {
  int coll;            /* enum mg_coll */
  int algo;            /* enum mg_algo; AUTO lets mg_select choose */
  int dtype, op;       /* enum mg_dtype / mg_op (op ignored by Bcast and Allgather) */
  uintptr_t send;      /* input (for in-place calls: what MPI defines as the input inside recv) */
  uintptr_t recv;      /* output (Reduce off the root: not significant, may be 0) */
  size_t count;        /* Allreduce/Bcast/Reduce: elements; Reduce_scatter_block: recvcount; Allgather: sendcount */
  int root;
  int nchannels;       /* 0: the cost model chooses */
  size_t chunk_bytes;  /* direct and ring kernels: bytes per pipeline step, at most the slot. Above the slot: one
                          step per channel over the consecutive slots it covers (at most nslots / 2; direct
                          kernel) where the channel's span fits in them, else one slot; 0: the cost model
                          chooses */
} mg_call;

/* 1 when the engine implements this (dtype, op) pair for reductions. */
int mg_supports(int dtype, int op);
/* Fills algo, nchannels and chunk_bytes for a call, as mg_collective would run it. */
int mg_select(const mg_team *team, mg_call *call);
/* Enqueues the collective on stream; returns once it is enqueued. async = 0: the caller waits for the
 * stream before its next call on this team (blocking MPI call); async = 1: it may not (stream=,
 * non-blocking, persistent), so a later call on another stream is ordered after this one. */
int mg_collective(mg_team *team, const mg_call *call, uintptr_t stream, int async);
/* A blocking call: returns once the output holds the result, ordered after the work queued on stream
 * before it. An LL call, or an LL128 call of at most resident_max_bytes, with nothing queued runs in
 * the team's resident kernel, with no launch; any other is enqueued on stream as by mg_collective and
 * waited for (the stream writes a word of mapped host memory after it, which the host spins on). */
int mg_collective_wait(mg_team *team, const mg_call *call, uintptr_t stream);
/* A gate: called once, without the GIL, at the last moment before a call runs (before the resident
 * kernel is rung or the kernel is launched, after the host work that can go first, such as the query
 * of the stream); 0 lets the call run, anything else declines it. */
typedef int (*mg_gate_fn)(void *ctx);
/* mg_collective_wait, where gate(ctx) decides at that moment whether the call runs: MG_ERR_DECLINED
 * when it does not (nothing ran, the team is unchanged). The caller's ranks agree there on the call's
 * path (mpigpu/_ext/board.h): the wait for its peers overlaps this rank's own host work. */
int mg_collective_wait_gated(mg_team *team, const mg_call *call, uintptr_t stream, mg_gate_fn gate, void *ctx);
/* A one-rank team's blocking call with nothing to copy (Bcast, in place): ordered after the team's
 * previous call as any call, then a query of stream. *idle = 0: work queued before the call is still
 * running; the caller waits for it (mg_collective_wait_queued, which may block: without the GIL). */
int mg_collective_nothing(mg_team *team, uintptr_t stream, int *idle);
/* Waits until stream has run what is queued on it now, as a blocking call waits for its launch. */
int mg_collective_wait_queued(mg_team *team, uintptr_t stream);
/* mg_collective (async = 1), then a generalized request completed once an event recorded after the
 * call has passed: writes the MPI_Request (request_bytes) to *request and a ticket for
 * mg_completion_wait/test; watch = 1: a watcher thread completes it too (needs MPI_THREAD_MULTIPLE),
 * for waits through MPI. The request completes with the call's fault (MG_ERR_TIMEOUT,
 * MG_ERR_ABORTED) if its kernel stopped. The team's device is current. */
int mg_collective_request(mg_team *team, const mg_call *call, uintptr_t stream, void *request, int watch,
                          uint64_t *ticket);

/* ---- the all-to-all family on the exchange transport (exchange.cu, exchange_kernel.cuh) ---- */
/* Rank r's call: send_bytes[p] bytes from send + send_off[p] go to rank p, which receives them with
 * recv_bytes[r] bytes at recv + recv_off[r] (the two must be equal, as MPI requires); the rank's own
 * block is a local copy (none where both addresses are equal: in place). Every rank of the team
 * makes the call. */
#define MG_SHAPE_MAX_DIMS 4  /* nested dimensions of a block shape (mpigpu/_paths/exchange.py refuses more) */
/* A block of a derived datatype: count instances of a regular layout (mg_layout's regular form, one
 * block repeated over nested dimensions, innermost first), each `extent` bytes after the last, the
 * first at the block's offset. Packed byte j of the block (MPI_Pack's order) lies at
 *   offset + (j / size) * extent + start + sum_k i_k * stride[k] + (j % size) % block
 * with (i_0, i_1, ...) the digits of (j % size) / block in the counts. size 0: plain bytes. */
typedef struct mg_block_shape {
  int64_t start, block, size, extent;
  int ndims;
  int64_t count[MG_SHAPE_MAX_DIMS], stride[MG_SHAPE_MAX_DIMS];
} mg_block_shape;
/* A reduction run after an exchange on its stream (Reduce_scatter, Scan, Exscan: mpigpu/_paths/
 * exchange_reduce.py): nrows rows of row_bytes at src, in order, reduced elementwise (count elements
 * of dtype under op) into dst, as mg_reduce_rows does. */
typedef struct mg_rows_reduction {
  int dtype, op, nrows;
  uintptr_t dst, src;
  size_t row_bytes, count;
} mg_rows_reduction;
typedef struct mg_exchange_call {
  uintptr_t send, recv;
  size_t send_bytes[MG_MAX_RANKS], send_off[MG_MAX_RANKS];
  size_t recv_bytes[MG_MAX_RANKS], recv_off[MG_MAX_RANKS];
  /* NULL (every block plain bytes), or one shape per rank: the block to or from that rank is packed
   * bytes of a derived datatype, moved straight between the caller's memory and the peers' FIFOs */
  const mg_block_shape *send_shape, *recv_shape;
  /* NULL, or the reduction that follows the exchange (before its wait or its request completes) */
  const mg_rows_reduction *then;
  int coll; /* enum mg_coll: the call it serves (a team's MG_SLOTS_BY_CALL picks the slots' end by it) */
} mg_exchange_call;
/* Enqueues the exchange on stream (async as for mg_collective). */
int mg_exchange(mg_team *team, const mg_exchange_call *call, uintptr_t stream, int async);
/* A blocking exchange: returns once recv holds what every peer sent, ordered after stream's work (in
 * the team's resident kernel where the stream is idle, the blocks plain and every pair one channel). */
int mg_exchange_wait(mg_team *team, const mg_exchange_call *call, uintptr_t stream);
/* A non-blocking exchange: enqueued on stream, with the generalized request that completes after it
 * (as mg_collective_request: a fault completes it with the fault's code). */
int mg_exchange_request(mg_team *team, const mg_exchange_call *call, uintptr_t stream, void *request, int watch,
                        uint64_t *ticket);

/* ---- user buffers over CUDA IPC, for point-to-point (ipc_buffers.cu) ---- */
/* The allocation holding ptr: its base, size, process-wide unique id, and whether cudaIpcGetMemHandle
 * can export it (cudaMalloc memory can; stream-ordered pools and cuMemCreate memory cannot). */
int mg_ipc_describe(uintptr_t ptr, uintptr_t *base, size_t *size, uint64_t *buffer_id, int *ipc_capable);
int mg_ipc_export(uintptr_t base, void *handle /* MG_IPC_HANDLE_BYTES */);
int mg_ipc_open(const void *handle, uintptr_t *base); /* maps a peer's allocation on the current device */
int mg_ipc_close(uintptr_t base);

/* ---- generalized requests for GPU work (completion.cu) ---- */
#define MG_COMPLETION_SLOTS 1024 /* GPU requests outstanding at once, per process */

/* The MPI functions and ABI facts request completion needs, resolved by the caller in the MPI library
 * in use. Handles are passed as intptr_t (int handles and pointer handles both fit). */
typedef struct mg_mpi_api {
  void *grequest_start;       /* MPI_Grequest_start */
  void *grequest_complete;    /* MPI_Grequest_complete */
  void *status_set_elements;  /* MPI_Status_set_elements */
  void *status_set_cancelled; /* MPI_Status_set_cancelled */
  intptr_t byte_type;         /* the handle of MPI_BYTE */
  int status_source_offset;   /* byte offsets of MPI_SOURCE and MPI_TAG in MPI_Status */
  int status_tag_offset;
  int any_source, any_tag;    /* MPI_ANY_SOURCE, MPI_ANY_TAG */
  int err_other;              /* MPI_ERR_OTHER: the request's error when its GPU work failed */
  int request_bytes;          /* sizeof(MPI_Request) */
} mg_mpi_api;

int mg_completion_init(const mg_mpi_api *api);
/* Blocks until the ticket's work is done and its request completed (by this call or the watcher);
 * returns the completion's code (a CUDA error, a fault's MG_ERR_*, or 0; 0 also once MPI has freed
 * the request). */
int mg_completion_wait(uint64_t ticket);
/* done = 1 when the work is done (its request then completed, with the code returned); never blocks. */
int mg_completion_test(uint64_t ticket, int *done);
/* Stops the watcher thread (before MPI_Finalize). */
void mg_completion_shutdown(void);

/* ---- derived datatypes packed on the device (pack.cu) ---- */
#define MG_PACK_MAX_DIMS 7  /* nested dimensions of a layout (the count of a call adds one) */
enum mg_pack_direction { MG_PACK = 0, MG_UNPACK = 1 };

/* A datatype's type map (mpigpu/_describe/datatypes.py): a block table repeated over nested dimensions,
 * packed in order (innermost dimension fastest, the table's entries in order within each). A regular
 * layout's table is one block (start, block); a longer table lives in device memory. Offsets and
 * strides are bytes from the buffer pointer, of any sign. */
typedef struct mg_layout {
  int64_t size;      /* packed bytes of one instance of the type */
  int64_t extent;    /* bytes from one instance to the next */
  int ndims;         /* 0 .. MG_PACK_MAX_DIMS */
  int64_t dim_count[MG_PACK_MAX_DIMS];
  int64_t dim_stride[MG_PACK_MAX_DIMS];
  int64_t nblocks;   /* entries in the table: 1 for a regular layout, else set by mg_layout_upload */
  int64_t start;     /* regular: offset of the block */
  int64_t block;     /* bytes of one pass over the table (regular: of the block) */
  const int64_t *offsets; /* table, device memory: nblocks entry offsets */
  const int64_t *packed;  /* table, device memory: nblocks + 1 packed offsets (prefix sums of lengths) */
  int group;         /* table: threads that copy one entry (a power of two up to 32) */
} mg_layout;

/* Copies a table of n >= 2 entries (host arrays of offsets and byte lengths) to the current
 * device, once per layout (synchronous); fills nblocks, block, offsets, packed and group. */
int mg_layout_upload(mg_layout *layout, const int64_t *offsets, const int64_t *lengths, int64_t n);
/* Frees an uploaded table (no kernel may still be using it; cudaFree waits for the device). */
int mg_layout_release(mg_layout *layout);
/* Enqueues on stream: MG_PACK copies count instances of the layout at buf (instance k at
 * buf + k * extent) into count * size contiguous bytes at packed; MG_UNPACK copies them back. No
 * allocation, no synchronization; the current device must be the one holding the table. */
int mg_pack(const mg_layout *layout, size_t count, uintptr_t buf, uintptr_t packed, int direction,
            uintptr_t stream);

#ifdef __cplusplus
}
#endif
#endif /* MPIGPU_CUDA_H */
