# CUDA layer of the hot path: runtime calls, pinned host buffers, and device teams (the workspace
# shared over CUDA IPC plus the collective launch), and generalized requests for GPU work. Only the
# plain C ABI of cuda/mpigpu_cuda.h is used here; MPI is reached only by the request completion in
# cuda/completion.cu, through function pointers that mpigpu._requests resolves.
import sys

from ._codes import ALIGNMENTS, SIZES, TYPESTR_CODES, typestr

include "_geometry.pxi"

from cpython.buffer cimport PyBUF_WRITABLE, PyBUF_FORMAT, PyBUF_ND
from libc.stdint cimport intptr_t, uint32_t, uint64_t, uintptr_t
from cpython.pyport cimport PY_SSIZE_T_MAX
from cpython.pycapsule cimport PyCapsule_GetName, PyCapsule_GetPointer, PyCapsule_IsValid, PyCapsule_New
from libc.string cimport memcpy, memset

from mpigpu._ext._board cimport Board, mg_board

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

    ctypedef struct mg_exchange_call:
        uintptr_t send, recv
        size_t send_bytes[MG_MAX_RANKS]
        size_t send_off[MG_MAX_RANKS]
        size_t recv_bytes[MG_MAX_RANKS]
        size_t recv_off[MG_MAX_RANKS]
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


class DeviceError(RuntimeError):
    """A CUDA runtime or engine error; `code` is the cudaError_t (> 0) or MG_ERR_* (< 0) value, one of
    FAULT_CODES when a call's kernel stopped (the process stays usable; the team is broken)."""
    def __init__(self, int code, str what):
        self.code = code
        super().__init__(f'{what}: {mg_error_string(code).decode()} (code {code})')

    @property
    def fault(self):
        """True for a fault of a device team (FAULT_CODES), not a CUDA error."""
        return self.code in FAULT_CODES


cdef inline int check(int code, str what) except -1:
    if code != 0:
        raise DeviceError(code, what)
    return 0


def device_count():
    """Number of visible CUDA devices; 0 when there is no driver or no device."""
    cdef int n = 0
    if mg_device_count(&n) != 0:
        return 0
    return n


def get_device():
    cdef int d = -1
    check(mg_get_device(&d), 'cudaGetDevice')
    return d


def set_device(int device):
    check(mg_set_device(device), 'cudaSetDevice')


cpdef tuple pointer_info(uintptr_t ptr):
    """(memory type, device ordinal) of a pointer; MEM_UNREGISTERED for plain host memory."""
    cdef int mt = 0, dev = -1
    mg_pointer_info(ptr, &mt, &dev)
    return mt, dev


cpdef bint is_device_memory(uintptr_t ptr):
    """True when `ptr` points into device or managed memory, asked of the driver without creating a
    context (host memory, pinned memory, or no driver: False)."""
    cdef int kind = MG_MEMORY_HOST, dev = -1
    mg_pointer_kind(ptr, &kind, &dev)
    return kind != MG_MEMORY_HOST


def pci_bus_id(int device):
    cdef char buf[64]
    check(mg_pci_bus_id(device, buf, 64), 'cudaDeviceGetPCIBusId')
    return buf.decode()


def device_by_pci_bus_id(str bus_id):
    cdef int d = -1
    b = bus_id.encode()
    if mg_device_by_pci_bus_id(b, &d) != 0:
        return -1
    return d


def can_access_peer(int device, int peer):
    cdef int can = 0
    check(mg_can_access_peer(device, peer, &can), 'cudaDeviceCanAccessPeer')
    return bool(can)


def stream_create():
    cdef uintptr_t s = 0
    check(mg_stream_create(&s), 'cudaStreamCreate')
    return s


def stream_destroy(uintptr_t s):
    mg_stream_destroy(s)


cpdef stream_sync(uintptr_t s):
    cdef int e
    with nogil:
        e = mg_stream_sync(s)
    check(e, 'cudaStreamSynchronize')


def event_create():
    cdef uintptr_t ev = 0
    check(mg_event_create(&ev), 'cudaEventCreate')
    return ev


def event_destroy(uintptr_t ev):
    mg_event_destroy(ev)


cpdef event_record(uintptr_t ev, uintptr_t stream):
    check(mg_event_record(ev, stream), 'cudaEventRecord')


cpdef event_sync(uintptr_t ev):
    cdef int e
    with nogil:
        e = mg_event_sync(ev)
    check(e, 'cudaEventSynchronize')


cpdef stream_wait_event(uintptr_t stream, uintptr_t ev):
    check(mg_stream_wait_event(stream, ev), 'cudaStreamWaitEvent')


cpdef memcpy_async(uintptr_t dst, uintptr_t src, size_t nbytes, uintptr_t stream):
    check(mg_memcpy_async(dst, src, nbytes, stream), 'cudaMemcpyAsync')


def stream_wait_host(uintptr_t stream, uintptr_t words, unsigned int value, double timeout_s):
    """Enqueues on `stream` a wait until the 32-bit word at `words` (pinned host memory) reaches
    `value`; after `timeout_s` (0: never) the wait ends and `value` is written to the next word."""
    check(mg_stream_wait_host(stream, words, value, timeout_s), 'stream wait for the host')


def load_kernels():
    """Loads every kernel the hierarchical path may launch while a stream waits for the host (the
    current device; lazy loading could otherwise synchronize the context at a first launch)."""
    check(mg_load_kernels(), 'loading kernels')


def stream_capturing(uintptr_t stream):
    """True while `stream` is being captured into a CUDA graph."""
    cdef int capturing = 0
    check(mg_stream_capturing(stream, &capturing), 'cudaStreamIsCapturing')
    return bool(capturing)


def reduce_rows(int dtype, int op, uintptr_t dst, uintptr_t src, size_t row_bytes, int nrows, size_t count,
                uintptr_t stream):
    """Enqueues on `stream`: dst = the nrows rows at src (row_bytes apart, count elements each) reduced in
    row order; device or pinned host memory."""
    check(mg_reduce_rows(dtype, op, dst, src, row_bytes, nrows, count, stream), 'reduce rows')


def supports(int dtype, int op):
    """True when the engine reduces this (dtype, op) pair on the device."""
    return bool(mg_supports(dtype, op))


cdef class DeviceMemory:
    """Device memory on the current device (cudaMalloc), freed with the object; it exports the CUDA
    Array Interface as bytes, so the paths take it as any device buffer."""
    cdef readonly uintptr_t ptr
    cdef readonly Py_ssize_t nbytes
    cdef readonly int device

    def __cinit__(self, Py_ssize_t nbytes):
        cdef uintptr_t p = 0
        cdef int d = -1
        check(mg_get_device(&d), 'cudaGetDevice')
        check(mg_device_alloc(<size_t>max(nbytes, 1), &p), 'cudaMalloc')
        self.ptr, self.nbytes, self.device = p, nbytes, d

    def __dealloc__(self):
        if self.ptr:
            mg_device_free(self.ptr)
            self.ptr = 0

    @property
    def __cuda_array_interface__(self):
        return {'shape': (self.nbytes,), 'typestr': '|u1', 'data': (self.ptr, False), 'version': 3,
                'strides': None, 'stream': None}


cdef class PinnedBuffer:
    """Page-locked host memory, writable, exposed through the buffer protocol (bytes)."""
    cdef readonly uintptr_t ptr
    cdef readonly Py_ssize_t nbytes
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]

    def __cinit__(self, Py_ssize_t nbytes):
        cdef uintptr_t p = 0
        check(mg_host_alloc(<size_t>max(nbytes, 1), &p), 'cudaHostAlloc')
        self.ptr = p
        self.nbytes = nbytes

    def __dealloc__(self):
        if self.ptr:
            mg_host_free(self.ptr)
            self.ptr = 0

    def __getbuffer__(self, Py_buffer *view, int flags):
        self.shape[0] = self.nbytes
        self.strides[0] = 1
        view.buf = <void *>self.ptr
        view.obj = self
        view.len = self.nbytes
        view.readonly = 0
        view.itemsize = 1
        if flags & PyBUF_FORMAT:
            view.format = b'B'
        else:
            view.format = NULL
        view.ndim = 1
        view.shape = self.shape if (flags & PyBUF_ND) else NULL
        view.strides = self.strides
        view.suboffsets = NULL
        view.internal = NULL

    def __releasebuffer__(self, Py_buffer *view):
        pass


cdef inline mg_call _call(int coll, int algo, int dtype, int op, uintptr_t send, uintptr_t recv, size_t count,
                          int root, int nchannels, size_t chunk) noexcept:
    """The C description of one collective call (Team.run, Team.run_request)."""
    cdef mg_call c
    c.coll = coll
    c.algo = algo
    c.dtype = dtype
    c.op = op
    c.send = send
    c.recv = recv
    c.count = count
    c.root = root
    c.nchannels = nchannels
    c.chunk_bytes = chunk
    return c


cdef class Team:
    """One rank's side of a device team: its workspace, the peers' mapped workspaces, and launches."""
    cdef mg_team *t
    cdef readonly int rank, nranks, device
    # The node's placement board where the communicator's ranks agree on each call (mpigpu/_agree.py),
    # or None (a team of one rank: nothing to agree); set by the team's setup.
    cdef public object board

    def __cinit__(self, int rank, int nranks, int device, object config):
        """`config`: the knobs (mpigpu.config: chunk_bytes, nslots, max_channels, timeout_s,
        split_steps, ll128_bytes, resident_us, resident_blocks, resident_max_bytes, resident_copy_max_bytes,
        exchange_channel_bytes)."""
        cdef mg_team_config cfg
        cfg.rank = rank
        cfg.nranks = nranks
        cfg.device = device
        cfg.slot_bytes = config.chunk_bytes
        cfg.nslots = config.nslots
        cfg.max_channels = config.max_channels
        cfg.timeout_s = config.timeout_s
        cfg.split_steps = config.split_steps
        cfg.ll128_bytes = config.ll128_bytes
        cfg.resident_us = config.resident_us
        cfg.resident_blocks = config.resident_blocks
        cfg.resident_max_bytes = config.resident_max_bytes
        cfg.resident_copy_max_bytes = config.resident_copy_max_bytes
        cfg.exchange_channel_bytes = config.exchange_channel_bytes
        self.t = NULL
        check(mg_team_create(&cfg, &self.t), 'workspace allocation')
        self.rank, self.nranks, self.device = rank, nranks, device

    def __dealloc__(self):
        if self.t != NULL:
            mg_team_destroy(self.t)
            self.t = NULL

    def close(self):
        """Unmaps the peers' workspaces and frees this rank's (no kernel may still be running)."""
        cdef int e = 0
        if self.t != NULL:
            e = mg_team_destroy(self.t)
            self.t = NULL
        check(e, 'workspace release')

    @property
    def workspace_bytes(self):
        return mg_team_workspace_bytes(self.t) if self.t != NULL else 0

    @property
    def resident_stats(self):
        """(blocking calls the resident kernel ran, instances of it launched, calls launched because
        they came alone) since team setup."""
        cdef uint64_t calls = 0, launches = 0, alone = 0
        if self.t != NULL:
            mg_team_resident_stats(self.t, &calls, &launches, &alone)
        return calls, launches, alone

    def abort(self):
        """Stops the team's kernels, running or queued, here and at the peers, whose calls end too;
        their calls and requests end with ERR_ABORTED and the team refuses later calls (ERR_BROKEN).
        From any thread, while another waits in a call; returns at once. Does nothing on a released
        team. (The GIL is kept: close() cannot free the team meanwhile.)"""
        if self.t != NULL:
            check(mg_team_abort(self.t), 'team abort')

    @property
    def fault(self):
        """0, or the team's fault: ERR_TIMEOUT or ERR_ABORTED (the first cause, at this rank or at
        fault_origin); 0 on a released team. Not for a hot path: with no fault recorded here it
        reads the team's state from the device, where a peer may have marked it broken."""
        cdef int code = 0, origin = -1
        if self.t != NULL:
            check(mg_team_fault(self.t, &code, &origin), 'team fault query')
        return code

    @property
    def fault_origin(self):
        """The rank whose kernel (or abort) gave up first, or -1 without a fault."""
        cdef int code = 0, origin = -1
        if self.t != NULL:
            check(mg_team_fault(self.t, &code, &origin), 'team fault query')
        return origin

    def missing_peers(self):
        """After a fault: the ranks that never began the call that faulted here (sorted)."""
        cdef uint32_t mask = 0
        if self.t == NULL:
            raise DeviceError(MG_ERR_TEAM, 'missing peers of a released team')
        check(mg_team_missing_peers(self.t, &mask), 'missing peers')
        return [k for k in range(self.nranks) if (mask >> k) & 1]

    def export_handle(self):
        cdef char h[MG_IPC_HANDLE_BYTES]
        check(mg_team_export(self.t, h), 'cudaIpcGetMemHandle')
        return h[:MG_IPC_HANDLE_BYTES]

    def open_peer(self, int peer, bytes handle):
        if len(handle) != MG_IPC_HANDLE_BYTES:
            raise ValueError('IPC handle must be %d bytes' % MG_IPC_HANDLE_BYTES)
        check(mg_team_open_peer(self.t, peer, <const char *>handle), 'cudaIpcOpenMemHandle')

    def select(self, int coll, int dtype, size_t count, int algo=MG_ALGO_AUTO, int nchannels=0):
        """(algo, nchannels, step bytes) the engine would run for this call (step: direct and ring kernels)."""
        cdef mg_call c
        c.coll = coll
        c.algo = algo
        c.dtype = dtype
        c.op = MG_SUM
        c.send = 0
        c.recv = 0
        c.count = count
        c.root = 0
        c.nchannels = nchannels
        c.chunk_bytes = 0
        check(mg_select(self.t, &c), 'select')
        return c.algo, c.nchannels, c.chunk_bytes

    cpdef run(self, int coll, int algo, int dtype, int op, uintptr_t send, uintptr_t recv, size_t count,
              int root, int nchannels, uintptr_t stream, bint sync, size_t chunk=0):
        """Enqueues one collective on `stream`; with `sync`, returns with its result (GIL released;
        an LL call, an LL128 call up to MPIGPU_RESIDENT_MAX_BYTES or a one-rank team's copy up to it,
        with nothing queued on `stream`, runs in a resident kernel instead). Without,
        the call may still run when the next is enqueued: a next call on another stream waits for it.
        `nchannels` and `chunk` (direct and ring kernel step bytes) of 0 let the cost model choose."""
        cdef int e
        if self.t == NULL:
            raise DeviceError(MG_ERR_TEAM, 'collective on a released team')
        cdef mg_call c = _call(coll, algo, dtype, op, send, recv, count, root, nchannels, chunk)
        if sync:
            with nogil:
                e = mg_collective_wait(self.t, &c, stream)
            check(e, 'collective')
        else:
            check(mg_collective(self.t, &c, stream, 1), 'collective launch')

    def exchange(self, uintptr_t send, uintptr_t recv, send_bytes, send_off, recv_bytes, recv_off,
                 uintptr_t stream, bint sync):
        """The all-to-all family's exchange (mg_exchange): send_bytes[p] bytes from send + send_off[p]
        to rank p, recv_bytes[p] bytes from rank p into recv + recv_off[p]; with `sync`, returns with
        the result (GIL released), else enqueued on `stream` as run() does."""
        cdef mg_exchange_call x
        self._exchange_call(&x, send, recv, send_bytes, send_off, recv_bytes, recv_off)
        if sync:
            self.run_exchange(&x, stream)
        else:
            check(mg_exchange(self.t, &x, stream, 1), 'exchange launch')

    cpdef uint64_t exchange_request(self, uintptr_t send, uintptr_t recv, send_bytes, send_off, recv_bytes,
                                    recv_off, uintptr_t stream, uintptr_t request, bint watch) except? 0:
        """The exchange (as exchange()) enqueued on `stream`, with the generalized request that
        completes after it (its handle written at address `request`), as run_request: returns the
        request's ticket; a fault completes the request with the fault's code. The device is current."""
        cdef uint64_t ticket = 0
        cdef mg_exchange_call x
        self._exchange_call(&x, send, recv, send_bytes, send_off, recv_bytes, recv_off)
        check(mg_exchange_request(self.t, &x, stream, <void *>request, watch, &ticket), 'exchange request')
        return ticket

    cdef int _exchange_call(self, mg_exchange_call *x, uintptr_t send, uintptr_t recv, send_bytes, send_off,
                            recv_bytes, recv_off) except -1:
        """Fills x from per-rank lists (exchange, exchange_request)."""
        cdef int r, n = len(send_bytes)
        if self.t == NULL:
            raise DeviceError(MG_ERR_TEAM, 'exchange on a released team')
        if n > MG_MAX_RANKS or len(send_off) != n or len(recv_bytes) != n or len(recv_off) != n:
            raise DeviceError(MG_ERR_ARG, f'exchange: {n} ranks of byte ranges (at most {MG_MAX_RANKS})')
        memset(x, 0, sizeof(mg_exchange_call))
        x.send, x.recv = send, recv
        for r in range(n):
            x.send_bytes[r], x.send_off[r] = send_bytes[r], send_off[r]
            x.recv_bytes[r], x.recv_off[r] = recv_bytes[r], recv_off[r]
        return 0

    cdef int run_exchange(self, const mg_exchange_call *x, uintptr_t stream) except -1:
        """A blocking exchange (mg_exchange_wait, the GIL released) of a team that is up."""
        cdef int e
        if self.t == NULL:  # released meanwhile (the board's wait releases the GIL)
            raise DeviceError(MG_ERR_TEAM, 'exchange on a released team')
        with nogil:
            e = mg_exchange_wait(self.t, x, stream)
        check(e, 'exchange')
        return 0

    cdef int run_agreed(self, Board board, int coll, int algo, int dtype, int op, uintptr_t send, uintptr_t recv,
                        size_t count, int root, int nchannels, uintptr_t stream) except -1:
        """run(sync) of a call this rank posted DEVICE for on `board`: its peers' posts are awaited at the
        last moment before the call runs (mg_collective_wait_gated), so the wait overlaps this rank's own
        host work. 1 when it ran; 0 when the ranks agreed on another path (the verdict stashed on the
        board for the general path), the team unchanged."""
        cdef int e
        cdef mg_board_gate g
        if self.t == NULL:
            raise DeviceError(MG_ERR_TEAM, 'collective on a released team')
        cdef mg_call c = _call(coll, algo, dtype, op, send, recv, count, root, nchannels, 0)
        g.b, g.coll, g.verdict, g.who, g.called = &board.b, coll, -1, -1, 0
        with nogil:
            e = mg_collective_wait_gated(self.t, &c, stream, mg_board_gate_fn, &g)
        if e == MG_ERR_DECLINED:
            board.stash(g.verdict, g.who)
            return 0
        if e and not g.called:
            mg_board_give_up(&board.b)  # posted DEVICE but never ran: peers must not wait for it
        check(e, 'collective')
        return 1

    cdef int run_nothing(self, uintptr_t stream) except -1:
        """A one-rank team's blocking call with nothing to copy (Bcast, in place): the wait for `stream`
        alone, the GIL released only if the stream is still busy (a query answers an idle one)."""
        cdef int e, idle = 0
        if self.t == NULL:
            raise DeviceError(MG_ERR_TEAM, 'collective on a released team')
        check(mg_collective_nothing(self.t, stream, &idle), 'collective')
        if not idle:
            with nogil:
                e = mg_collective_wait_queued(self.t, stream)
            check(e, 'collective')
        return 0

    cpdef uint64_t run_request(self, int coll, int algo, int dtype, int op, uintptr_t send, uintptr_t recv,
                               size_t count, int root, int nchannels, uintptr_t stream, uintptr_t request,
                               bint watch) except? 0:
        """Enqueues one collective on `stream` and starts the generalized request that completes
        after it (writing the handle at address `request`); returns the request's ticket. The device
        is current. If the call's kernel stops (a fault), the request completes with the fault's code
        (request_wait and request_test raise it) and MPI_ERR_OTHER."""
        cdef uint64_t ticket = 0
        if self.t == NULL:
            raise DeviceError(MG_ERR_TEAM, 'collective on a released team')
        cdef mg_call c = _call(coll, algo, dtype, op, send, recv, count, root, nchannels, 0)
        check(mg_collective_request(self.t, &c, stream, <void *>request, watch, &ticket), 'collective request')
        return ticket


# ---- user buffers over CUDA IPC (cuda/ipc_buffers.cu) --------------------------------------------
cpdef tuple ipc_describe(uintptr_t ptr):
    """(base, size, buffer id, exportable) of the allocation holding device pointer `ptr`."""
    cdef uintptr_t base = 0
    cdef size_t size = 0
    cdef uint64_t ident = 0
    cdef int capable = 0
    check(mg_ipc_describe(ptr, &base, &size, &ident, &capable), 'cuPointerGetAttributes')
    return base, size, ident, bool(capable)


def ipc_export(uintptr_t base):
    """The IPC handle (bytes) of the allocation at `base`."""
    cdef char h[MG_IPC_HANDLE_BYTES]
    check(mg_ipc_export(base, h), 'cudaIpcGetMemHandle')
    return h[:MG_IPC_HANDLE_BYTES]


def ipc_open(bytes handle):
    """Maps a peer's allocation on the current device; returns its base address here."""
    cdef uintptr_t base = 0
    if len(handle) != MG_IPC_HANDLE_BYTES:
        raise ValueError('IPC handle must be %d bytes' % MG_IPC_HANDLE_BYTES)
    check(mg_ipc_open(<const char *>handle, &base), 'cudaIpcOpenMemHandle')
    return base


def ipc_close(uintptr_t base):
    check(mg_ipc_close(base), 'cudaIpcCloseMemHandle')


# ---- generalized requests for GPU work (cuda/completion.cu) --------------------------------------
def request_init(uintptr_t grequest_start, uintptr_t grequest_complete, uintptr_t status_set_elements,
                 uintptr_t status_set_cancelled, intptr_t byte_type, int status_source_offset,
                 int status_tag_offset, int any_source, int any_tag, int err_other, int request_bytes):
    """Hands the MPI functions and ABI facts to the completion layer (once per process)."""
    cdef mg_mpi_api api
    if request_bytes not in (4, 8):
        raise ValueError('MPI_Request of %d bytes' % request_bytes)
    api.grequest_start = <void *>grequest_start
    api.grequest_complete = <void *>grequest_complete
    api.status_set_elements = <void *>status_set_elements
    api.status_set_cancelled = <void *>status_set_cancelled
    api.byte_type = byte_type
    api.status_source_offset = status_source_offset
    api.status_tag_offset = status_tag_offset
    api.any_source = any_source
    api.any_tag = any_tag
    api.err_other = err_other
    api.request_bytes = request_bytes
    check(mg_completion_init(&api), 'request_init')


cpdef request_wait(uint64_t ticket):
    """Blocks (GIL released) until the ticket's GPU work is done and its request completed; raises
    DeviceError with the completion's code when the work failed (a CUDA error or a fault)."""
    cdef int e
    with nogil:
        e = mg_completion_wait(ticket)
    check(e, 'GPU work of a request')


cpdef bint request_test(uint64_t ticket) except -1:
    """True when the ticket's GPU work is done (its request is then complete); raises as request_wait."""
    cdef int done = 0
    check(mg_completion_test(ticket, &done), 'GPU work of a request')
    return done


def request_shutdown():
    """Stops the completion watcher thread (before MPI is finalized)."""
    with nogil:
        mg_completion_shutdown()


# ---- fast path -----------------------------------------------------------------------------------
# The common call (CUDA Array Interface arrays, no buffer specification, types and counts that
# match) is handled here without Python-level parsing. Anything else returns 0 and takes the general
# path in mpigpu._buffers, which also produces the precise error messages.
cdef dict _CAI_CODE = TYPESTR_CODES
cdef tuple _SIZES = SIZES
# A pointer less aligned than its type takes the general path, which refuses it (mpigpu._call.build).
cdef tuple _ALIGN = ALIGNMENTS
# Most elements a buffer may hold: its bytes must fit a Py_ssize_t (16: the largest element).
cdef Py_ssize_t _MAX_ELEMENTS = PY_SSIZE_T_MAX // 16
# Addresses and stream handles: what a pointer holds.
cdef object _UINTPTR_LIMIT = (<object>1) << (8 * sizeof(uintptr_t))
cdef object _INTPTR_LIMIT = (<object>1) << (8 * sizeof(uintptr_t) - 1)


# CuPy arrays are read from their attributes (no interface dictionary, no pointer query): building
# __cuda_array_interface__ and asking the driver where a pointer lives cost ~1.5 us per array.
cdef object _cupy_ndarray = None      # cupy.ndarray, once CuPy has been imported by the program
cdef object _cupy_current_stream = None
cdef dict _NUM_CODE = {}              # numpy dtype.num -> mg_dtype code
cdef object _last_dtype = None        # the last array's dtype object and its code: programs repeat them
cdef int _last_code = -1

# CuPy's own C function for its current stream (cupy_backends.cuda.stream declares it in its .pxd, so
# Cython exports it to other modules), called directly: CuPy has no Python function for the pointer
# alone, and a blocking one-rank call with nothing to copy is ~2 us in all, where each Python call
# counts (docs/benchmarks.md, one rank). Where the export is missing or its signature differs, the
# Python call (get_current_stream().ptr).
ctypedef intptr_t (*_stream_ptr_fn)() except *
cdef _stream_ptr_fn _cupy_stream_c = NULL
cdef bytes _CUPY_STREAM_SIGNATURE = b'intptr_t (void)'


cdef _stream_ptr_fn _cupy_stream_function():
    """CuPy's get_current_stream_ptr, where its module exports it with the signature expected."""
    backend = sys.modules.get('cupy_backends.cuda.stream')
    capi = getattr(backend, '__pyx_capi__', None)
    cap = capi.get('get_current_stream_ptr') if type(capi) is dict else None
    if cap is None:
        return NULL
    name = PyCapsule_GetName(cap)
    if name == NULL or <bytes>name != _CUPY_STREAM_SIGNATURE or not PyCapsule_IsValid(cap, name):
        return NULL
    return <_stream_ptr_fn>PyCapsule_GetPointer(cap, name)


cdef int _cupy_attach() except -1:
    global _cupy_ndarray, _cupy_current_stream
    m = sys.modules.get('cupy')
    if m is None:
        return 0
    import numpy
    for ch in '?bBhHiIlLqQefdFD':
        dt = numpy.dtype(ch)
        key = typestr(dt.kind, dt.itemsize)
        if key in _CAI_CODE:
            _NUM_CODE[dt.num] = _CAI_CODE[key]
    global _cupy_stream_c
    _cupy_stream_c = _cupy_stream_function()
    get = m.cuda.get_current_stream
    _cupy_current_stream = lambda: get().ptr
    _cupy_ndarray = m.ndarray
    return 1


cdef inline bint _cupy(object obj, uintptr_t *ptr, Py_ssize_t *count, int *dtype, int *device) except? False:
    """Reads a C-contiguous cupy.ndarray (exactly that type); False when obj is not one."""
    if _cupy_ndarray is None and not _cupy_attach():
        return False
    global _last_dtype, _last_code
    if type(obj) is not _cupy_ndarray or not obj._c_contiguous:
        return False
    dt = obj.dtype
    if dt is not _last_dtype:
        code = _NUM_CODE.get(dt.num)
        if code is None:
            return False
        _last_dtype, _last_code = dt, code
    mp = obj.data
    ptr[0] = <uintptr_t>mp.ptr
    count[0] = obj.size
    dtype[0] = _last_code
    device[0] = mp.device_id
    return True


cdef inline Py_ssize_t _cupy_stream():
    """CuPy's current stream as its __cuda_array_interface__ reports it (1: the legacy default)."""
    cdef Py_ssize_t p = _cupy_stream_c() if _cupy_stream_c != NULL else _cupy_current_stream()
    return p if p != 0 else 1


cdef inline bint _cai(object obj, uintptr_t *ptr, Py_ssize_t *count, int *dtype, bint *ro,
                      Py_ssize_t *stream):
    """Reads a well-formed contiguous CAI array; False when the fast path does not apply to it (anything
    unusual, malformed exports included: the general path validates them and raises)."""
    cdef type t = type(obj)
    cdef Py_ssize_t n = 1, itemsize, expect, extent, k, nd
    if t is list or t is tuple or t.__module__.startswith('torch'):
        return False
    try:
        cai = obj.__cuda_array_interface__
    except Exception:
        return False
    if type(cai) is not dict or cai.get('mask') is not None:
        return False
    typestr = cai.get('typestr')
    shape = cai.get('shape')
    data = cai.get('data')
    strides = cai.get('strides')
    version = cai.get('version', 0)
    if (type(typestr) is not str or type(shape) is not tuple or type(data) is not tuple or len(data) != 2
            or type(data[0]) is not int or type(version) is not int):
        return False
    if strides is not None and (type(strides) is not tuple or len(strides) != len(shape)):
        return False
    code = _CAI_CODE.get(typestr)
    if code is None:
        return False
    itemsize = _SIZES[code]
    nd = len(shape)
    for k in range(nd):
        extent = shape[k] if type(shape[k]) is int else -1
        if extent < 0 or (extent and n > _MAX_ELEMENTS // extent):
            return False
        n *= extent
    if strides is not None and n > 1:
        expect = itemsize
        for k in range(nd - 1, -1, -1):
            extent = shape[k]
            if extent != 1 and (type(strides[k]) is not int or strides[k] != expect):
                return False
            expect *= extent
    if data[0] < 0 or data[0] >= _UINTPTR_LIMIT or (data[0] == 0 and n):
        return False
    s = cai.get('stream') if version >= 3 else None
    if s is not None and (type(s) is not int or s <= 0 or s >= _INTPTR_LIMIT):
        return False
    ptr[0] = <uintptr_t>data[0]
    ro[0] = bool(data[1])
    count[0] = n
    dtype[0] = code
    stream[0] = 0 if s is None else <Py_ssize_t>s
    return True


cdef inline bint _on_device(uintptr_t ptr, int device):
    cdef int mt = 0, dev = -1
    if mg_pointer_info(ptr, &mt, &dev) != 0:
        return False
    return (mt == _MEM_DEVICE or mt == _MEM_MANAGED) and dev == device


cpdef int fast_collective(Team team, int device, int coll, object sendbuf, object recvbuf, int op_code,
                          int root, bint inplace, int algo, int nchannels, Py_ssize_t stream=-1) except -1:
    """Runs Allreduce, Bcast (buffer as recvbuf), Reduce_scatter_block, Reduce (recvbuf None off the root)
    or Allgather with MPI semantics when the call is the common case and `device` is current; returns 1
    when done, 0 when the general path must handle it. stream < 0: on the producer's stream, returning
    with the result (MPI blocking); stream >= 0: enqueued on that stream, returning at once."""
    cdef uintptr_t sp = 0, rp = 0
    cdef Py_ssize_t sc = 0, rc = 0, ss = 0, rs = 0, count = 0, own = 0
    cdef int sd = -1, rd = -1, rdev = -1, sdev = -1, current = -1
    cdef bint sro = False, rro = False
    cdef bint off_root = coll == MG_REDUCE and team.rank != root  # a Reduce's recvbuf is not significant here
    cdef bint one_buffer = inplace or coll == MG_BCAST
    if team.t == NULL or root < 0 or root >= team.nranks:
        return 0
    if mg_get_device(&current) != 0 or current != device:
        return 0  # the general path makes the team's device current
    if off_root:
        if inplace:
            return 0  # MPI.IN_PLACE off the root: the general path raises
        if _cupy(sendbuf, &sp, &sc, &sd, &sdev):
            ss = _cupy_stream()
        elif not _cai(sendbuf, &sp, &sc, &sd, &sro, &ss):
            return 0
        rd, rs = sd, ss  # rp stays 0: no output off the root
    else:
        if _cupy(recvbuf, &rp, &rc, &rd, &rdev):
            rs = _cupy_stream()
        elif not _cai(recvbuf, &rp, &rc, &rd, &rro, &rs) or rro:
            return 0
        if one_buffer:
            sd, sdev = rd, rdev
        elif _cupy(sendbuf, &sp, &sc, &sd, &sdev):
            if sd != rd or (rdev < 0 and _cupy_stream() != rs):
                return 0
        elif not _cai(sendbuf, &sp, &sc, &sd, &sro, &ss) or sd != rd or ss != rs:
            return 0
    if coll != MG_ALLGATHER and coll != MG_BCAST and not mg_supports(rd, op_code):
        return 0
    if geometry(coll, team.nranks, team.rank, not one_buffer, sc, not off_root, rc, one_buffer, &count,
                &own) != GEOMETRY_OK:
        return 0  # the general path raises, naming the counts
    if one_buffer:
        sp = rp + <uintptr_t>(own * _SIZES[rd])
    if (sp | rp) % <uintptr_t>_ALIGN[rd]:
        return 0  # refused on the general path, whatever the count
    if count and not off_root and not (rdev == device if rdev >= 0 else _on_device(rp, device)):
        return 0
    if count and not one_buffer and not (sdev == device if sdev >= 0 else _on_device(sp, device)):
        return 0
    if team.board is not None:  # ranks that must agree on the call's path (mpigpu/_agree.py)
        if type(team.board) is not Board:
            return 0  # they agree on the general path (across nodes, a broken communicator)
        return _run_agreed(team, <Board>team.board, coll, algo, rd, op_code, sp, rp, count, root, nchannels,
                           stream, rs)
    if count == 0:
        return 1
    if stream >= 0:
        team.run(coll, algo, rd, op_code, sp, rp, count, root, nchannels, <uintptr_t>stream, False)
    elif one_buffer and team.nranks == 1:
        team.run_nothing(<uintptr_t>rs)
    else:
        team.run(coll, algo, rd, op_code, sp, rp, count, root, nchannels, <uintptr_t>rs, True)
    return 1


cdef int _run_agreed(Team team, Board board, int coll, int algo, int dtype, int op, uintptr_t sp, uintptr_t rp,
                     Py_ssize_t count, int root, int nchannels, Py_ssize_t stream, Py_ssize_t rs) except -1:
    """The fast path's call on a team whose ranks agree on each call: this rank posts DEVICE, and the
    engine runs it when every rank did; a blocking call waits for its peers' posts inside the CUDA
    layer, at the last moment (Team.run_agreed). 0: another verdict, kept for the general path."""
    cdef int who = -1, verdict
    if board.post_device(coll) != 0:
        board.stash(MG_VERDICT_TIMEOUT, MG_BOARD_BEHIND)  # nothing posted
        return 0
    if count and stream < 0:
        return team.run_agreed(board, coll, algo, dtype, op, sp, rp, count, root, nchannels, <uintptr_t>rs)
    verdict = board.wait_device(coll, &who)
    if verdict != MG_VERDICT_DEVICE:
        board.stash(verdict, who)
        return 0
    if count:
        team.run(coll, algo, dtype, op, sp, rp, count, root, nchannels, <uintptr_t>stream, False)
    return 1


# ---- the fast path's entry: the communicator's state found and the call run in one Cython call --------
# (a Python function in between cost ~0.3 us per call: a one-rank 4 MB copy took 12.7 us where the raw
# team call took 11.4, docs/benchmarks.md "One rank"). Bound once by mpigpu._paths.engine.
cdef object _entry_key = None         # the key of a communicator's state in its __dict__ (mpigpu._state)
cdef dict _entry_ops = None           # MPI.Op handle -> op code
cdef object _entry_config = None      # mpigpu's config (algo and nchannels read per call: tests change them)
cdef dict _entry_algos = None         # MPIGPU_ALGO value -> algorithm code
cdef object _entry_failed = None      # (state, coll, DeviceError) -> the mpigpu.Error to raise
cdef type _entry_op_type = None
cdef object _entry_in_place = None
# The last op's code: a program passes the same op object call after call. Only predefined ops have
# codes, and their handles never change (MPI cannot free them).
cdef object _entry_last_op = None
cdef int _entry_last_code = -1


def bind_fast_entry(state_key, op_codes, config, algos, failed, op_type, in_place):
    """Gives fast_entry what it reads: see the declarations above."""
    global _entry_key, _entry_ops, _entry_config, _entry_algos, _entry_failed, _entry_op_type, _entry_in_place
    _entry_key, _entry_ops, _entry_config, _entry_algos = state_key, dict(op_codes), config, dict(algos)
    _entry_failed, _entry_op_type, _entry_in_place = failed, op_type, in_place
    global _entry_last_op
    _entry_last_op = None


cpdef bint fast_entry(object comm, int coll, object sendbuf, object recvbuf, object op, int root=0,
                      Py_ssize_t stream=-1) except -1:
    """fast_collective for communicator `comm` once its device team is up: True when it ran the call,
    False when the general path must take it (no state or team yet, an op the engine lacks, anything
    unusual about the buffers)."""
    global _entry_last_op, _entry_last_code
    cdef int code = 0
    cdef dict attrs
    cdef Team team
    try:
        attrs = comm.__dict__
    except AttributeError:  # mpi4py's own objects, which mpigpu's unbound methods may be called on
        return False
    st = attrs.get(_entry_key)
    if st is None:
        return False
    t = st.team
    if type(t) is not Team:  # none yet (or the CPU tests' fake team)
        return False
    team = <Team>t
    if coll != MG_ALLGATHER and coll != MG_BCAST:
        if op is _entry_last_op:
            code = _entry_last_code
        else:
            if not isinstance(op, _entry_op_type):
                return False
            code = _entry_ops.get(op.handle, -1)
            if code < 0:
                return False
            _entry_last_op, _entry_last_code = op, code
    cdef bint in_place = sendbuf is _entry_in_place
    cdef int algo = MG_ALGO_AUTO, nchannels = 0
    if team.nranks != 1:  # a one-rank team's calls are copies: no algorithm or channels to choose
        cfg = _entry_config
        algo, nchannels = _entry_algos.get(cfg.algo, MG_ALGO_AUTO), cfg.nchannels
    try:
        return fast_collective(team, team.device, coll, sendbuf, recvbuf, code, root, in_place, algo, nchannels,
                               stream) == 1
    except DeviceError as exc:
        raise _entry_failed(st, coll, exc) from None


cdef int _fast_entry_c(object comm, int coll, object sendbuf, object recvbuf, object op, int root,
                       Py_ssize_t stream) except -1:
    return fast_entry(comm, coll, sendbuf, recvbuf, op, root, stream)


cdef bytes _capsule_name = None  # a capsule keeps a pointer to its name: held here for good


def fast_entry_capsule(bytes name):
    """fast_entry as a C function in a capsule called `name`: the communicators' methods
    (mpigpu/_ext/_front.pyx) call it with no Python call in between."""
    global _capsule_name
    _capsule_name = name
    return PyCapsule_New(<void *>_fast_entry_c, <const char *>_capsule_name, NULL)


include "_pack.pxi"
include "_exchange.pxi"
