# The C ABI this module calls: cuda/mpigpu_cuda.h (the CUDA layer) and board.h (the placement
# board's gate), declared once for every part of mpigpu._ext._device (included by _device.pyx).

cdef extern from "board.h" nogil:
    enum:
        MG_VERDICT_DEVICE
        MG_VERDICT_TIMEOUT
        MG_BOARD_BEHIND
    ctypedef struct mg_board_gate:
        mg_board *b
        int coll, verdict, who, called
    int mg_board_gate_fn(void *ctx) noexcept
    void mg_board_give_up(mg_board *b)

cdef extern from "mpigpu_cuda.h" nogil:
    enum:
        MG_MAX_RANKS
        MG_MAX_CHANNELS
        MG_IPC_HANDLE_BYTES
    enum:
        MG_SUM
        MG_ALGO_AUTO
    enum:
        MG_DRAIN_ROUNDS
        MG_DRAIN_ARRIVAL
        MG_DRAIN_AUTO
        MG_SLOTS_AT_RECEIVER
        MG_SLOTS_AT_SENDER
        MG_SLOTS_BY_CALL
        MG_ROUNDS_ALIGNED
        MG_ROUNDS_STAGGERED
    enum:
        MG_ERR_ARG
        MG_ERR_TEAM
        MG_ERR_TIMEOUT
        MG_ERR_ABORTED
        MG_ERR_BROKEN
        MG_ERR_DECLINED
    const char *mg_error_string(int err)
    int mg_device_count(int *count)
    int mg_get_device(int *device)
    int mg_set_device(int device)
    int mg_pointer_info(uintptr_t ptr, int *memtype, int *device)
    enum:
        MG_MEMORY_HOST
        MG_MEMORY_DEVICE
        MG_MEMORY_MANAGED
    int mg_pointer_kind(uintptr_t ptr, int *kind, int *device)
    int mg_pci_bus_id(int device, char *buf, int len)
    int mg_device_by_pci_bus_id(const char *bus_id, int *device)
    int mg_can_access_peer(int device, int peer, int *can)
    int mg_device_alloc(size_t bytes, uintptr_t *ptr)
    int mg_device_free(uintptr_t ptr)
    int mg_host_alloc(size_t bytes, uintptr_t *ptr)
    int mg_host_free(uintptr_t ptr)
    int mg_stream_create(uintptr_t *stream)
    int mg_stream_destroy(uintptr_t stream)
    int mg_stream_sync(uintptr_t stream)
    int mg_stream_idle(uintptr_t stream, int *idle)
    int mg_event_create(uintptr_t *event)
    int mg_event_destroy(uintptr_t event)
    int mg_event_record(uintptr_t event, uintptr_t stream)
    int mg_event_sync(uintptr_t event)
    int mg_stream_wait_event(uintptr_t stream, uintptr_t event)
    int mg_memcpy_async(uintptr_t dst, uintptr_t src, size_t bytes, uintptr_t stream)
    int mg_stream_wait_host(uintptr_t stream, uintptr_t words, unsigned int value, double timeout_s)
    int mg_stream_capturing(uintptr_t stream, int *capturing)
    int mg_capture_begin(uintptr_t stream)
    int mg_capture_end(uintptr_t stream, uintptr_t *graph)
    int mg_graph_launch(uintptr_t graph, uintptr_t stream)
    int mg_graph_destroy(uintptr_t graph)
    int mg_load_kernels()
    int mg_reduce_rows(int dtype, int op, uintptr_t dst, uintptr_t src, size_t row_bytes, int nrows, size_t count,
                       uintptr_t stream)

    ctypedef struct mg_team:
        pass
    ctypedef struct mg_team_config:
        int rank, nranks, device
        size_t slot_bytes
        int nslots
        int max_channels
        int split_steps
        size_t ll128_bytes
        double timeout_s
        double resident_us
        int resident_blocks
        size_t resident_max_bytes
        size_t resident_copy_max_bytes
        size_t exchange_channel_bytes
        size_t exchange_ll_bytes
        int exchange_drain
        int exchange_slots
        int exchange_rounds
    int mg_team_create(const mg_team_config *cfg, mg_team **team)
    int mg_team_export(mg_team *team, void *handle)
    int mg_team_open_peer(mg_team *team, int peer, const void *handle)
    int mg_team_destroy(mg_team *team)
    size_t mg_team_workspace_bytes(const mg_team *team)
    void mg_team_resident_stats(const mg_team *team, uint64_t *calls, uint64_t *launches, uint64_t *alone)
    int mg_team_abort(mg_team *team)
    int mg_team_fault(mg_team *team, int *code, int *origin)
    int mg_team_missing_peers(mg_team *team, uint32_t *mask)

    ctypedef struct mg_call:
        int coll, algo, dtype, op
        uintptr_t send, recv
        size_t count
        int root, nchannels
        size_t chunk_bytes
    int mg_supports(int dtype, int op)
    int mg_select(const mg_team *team, mg_call *call)
    int mg_collective(mg_team *team, const mg_call *call, uintptr_t stream, int async_)
    int mg_collective_wait(mg_team *team, const mg_call *call, uintptr_t stream)
    ctypedef int (*mg_gate_fn)(void *ctx) noexcept nogil
    int mg_collective_wait_gated(mg_team *team, const mg_call *call, uintptr_t stream, mg_gate_fn gate,
                                 void *ctx)
    int mg_collective_nothing(mg_team *team, uintptr_t stream, int *idle)
    int mg_collective_wait_queued(mg_team *team, uintptr_t stream)
    int mg_collective_request(mg_team *team, const mg_call *call, uintptr_t stream, void *request, int watch,
                              uint64_t *ticket)

    enum: MG_SHAPE_MAX_DIMS
    ctypedef struct mg_block_shape:
        int64_t start, block, size, extent
        int ndims
        int64_t count[MG_SHAPE_MAX_DIMS]
        int64_t stride[MG_SHAPE_MAX_DIMS]
    ctypedef struct mg_rows_reduction:
        int dtype, op, nrows
        uintptr_t dst, src
        size_t row_bytes, count
    ctypedef struct mg_exchange_call:
        uintptr_t send, recv
        size_t send_bytes[MG_MAX_RANKS]
        size_t send_off[MG_MAX_RANKS]
        size_t recv_bytes[MG_MAX_RANKS]
        size_t recv_off[MG_MAX_RANKS]
        const mg_block_shape *send_shape
        const mg_block_shape *recv_shape
        const mg_rows_reduction *then
        int coll
    int mg_exchange(mg_team *team, const mg_exchange_call *call, uintptr_t stream, int async_)
    int mg_exchange_wait(mg_team *team, const mg_exchange_call *call, uintptr_t stream)
    int mg_exchange_request(mg_team *team, const mg_exchange_call *call, uintptr_t stream, void *request, int watch,
                            uint64_t *ticket)

    int mg_ipc_describe(uintptr_t ptr, uintptr_t *base, size_t *size, uint64_t *buffer_id, int *ipc_capable)
    int mg_ipc_export(uintptr_t base, void *handle)
    int mg_ipc_open(const void *handle, uintptr_t *base)
    int mg_ipc_close(uintptr_t base)

    ctypedef struct mg_mpi_api:
        void *grequest_start
        void *grequest_complete
        void *status_set_elements
        void *status_set_cancelled
        intptr_t byte_type
        int status_source_offset, status_tag_offset, any_source, any_tag, err_other, request_bytes
    int mg_completion_init(const mg_mpi_api *api)
    int mg_completion_wait(uint64_t ticket)
    int mg_completion_test(uint64_t ticket, int *done)
    void mg_completion_shutdown()

MAX_RANKS = MG_MAX_RANKS
MAX_CHANNELS = MG_MAX_CHANNELS
# The codes of a fault (DeviceError.code, Team.fault): a peer that never arrived within the timeout,
# an abort (Team.abort, here or at a peer), and any call on a team that an earlier fault broke.
ERR_TIMEOUT = MG_ERR_TIMEOUT
ERR_ABORTED = MG_ERR_ABORTED
ERR_BROKEN = MG_ERR_BROKEN
FAULT_CODES = frozenset((ERR_TIMEOUT, ERR_ABORTED, ERR_BROKEN))
# memory types of pointer_info(): the values of cudaMemoryType
cdef enum:
    _MEM_UNREGISTERED = 0
    _MEM_HOST = 1
    _MEM_DEVICE = 2
    _MEM_MANAGED = 3
MEM_UNREGISTERED, MEM_HOST, MEM_DEVICE, MEM_MANAGED = _MEM_UNREGISTERED, _MEM_HOST, _MEM_DEVICE, _MEM_MANAGED
