# CUDA layer of the hot path: runtime calls, pinned host buffers, and device teams (the workspace
# shared over CUDA IPC plus the collective launch), and generalized requests for GPU work. Only the
# plain C ABI of cuda/mpigpu_cuda.h is used here; MPI is reached only by the request completion in
# cuda/completion.cu, through function pointers that mpigpu._state.requests resolves. One module, in parts:
# this file (runtime calls, memory, Team), _cuda_api.pxi (the C ABI's declarations), _requests.pxi
# (IPC of user buffers, generalized requests), _arrays.pxi (the fast paths' array readers), _fast.pxi (the
# engine collectives' fast path), _pmpi_entry.pxi (the interposer's entry),
# _pack.pxi (derived datatypes' pack plans), _exchange.pxi (the exchange's fast path and shapes),
# _p2p.pxi (blocking point-to-point's fast path).
import sys
from threading import local as _thread_local

from ._codes import ALIGNMENTS, BY_KIND, SIZES, TYPESTR_CODES, typestr

include "_geometry.pxi"

from cpython.buffer cimport PyBUF_WRITABLE, PyBUF_FORMAT, PyBUF_ND
from libc.stdint cimport int64_t, intptr_t, uint32_t, uint64_t, uintptr_t
from cpython.pyport cimport PY_SSIZE_T_MAX
from cpython.pycapsule cimport PyCapsule_GetName, PyCapsule_GetPointer, PyCapsule_IsValid, PyCapsule_New
from libc.string cimport memcpy, memset

from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from mpigpu._ext._board cimport Board, mg_board, routes_epoch

include "_cuda_api.pxi"

# The exchange's team knobs (mpigpu.config's spellings) as mg_exchange_drain, mg_exchange_slots and
# mg_exchange_rounds
_DRAINS = {'rounds': MG_DRAIN_ROUNDS, 'arrival': MG_DRAIN_ARRIVAL, 'auto': MG_DRAIN_AUTO}
_SLOTS = {'receiver': MG_SLOTS_AT_RECEIVER, 'sender': MG_SLOTS_AT_SENDER, 'auto': MG_SLOTS_BY_CALL}
_ROUNDS = {'aligned': MG_ROUNDS_ALIGNED, 'staggered': MG_ROUNDS_STAGGERED}


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


def capture_begin(uintptr_t stream):
    """Begins recording what is enqueued on `stream` (and on streams that join it through events) into
    a graph (mpigpu/_paths/hier/replay.py); nothing enqueued runs until the graph is launched."""
    check(mg_capture_begin(stream), 'cudaStreamBeginCapture')


def capture_end(uintptr_t stream):
    """Ends the recording begun on `stream`: the Graph to launch."""
    cdef uintptr_t g = 0
    check(mg_capture_end(stream, &g), 'cudaStreamEndCapture')
    graph = Graph()
    graph.g = g
    return graph


cdef class Graph:
    """A recorded sequence of enqueued work, launched as one call (an executable CUDA graph)."""
    cdef uintptr_t g

    cpdef launch(self, uintptr_t stream):
        if self.g == 0:
            raise DeviceError(MG_ERR_ARG, 'launch of a released graph')
        check(mg_graph_launch(self.g, stream), 'cudaGraphLaunch')

    def close(self):
        cdef uintptr_t g = self.g
        self.g = 0
        if g:
            check(mg_graph_destroy(g), 'cudaGraphExecDestroy')

    def __dealloc__(self):
        if self.g:
            mg_graph_destroy(self.g)


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


cdef struct ExchangeCall:
    # an exchange's C description and what it points into (shapes, the reduction), on the caller's stack
    mg_exchange_call x
    mg_block_shape send_shape[MG_MAX_RANKS]
    mg_block_shape recv_shape[MG_MAX_RANKS]
    mg_rows_reduction then


cdef class Team:
    """One rank's side of a device team: its workspace, the peers' mapped workspaces, and launches."""
    cdef mg_team *t
    cdef readonly int rank, nranks, device
    # The node's placement board where the communicator's ranks agree on each call (mpigpu/_state/agree.py),
    # or None (a team of one rank: nothing to agree); set by the team's setup.
    cdef public object board

    def __cinit__(self, int rank, int nranks, int device, object config):
        """`config`: the knobs (mpigpu.config: chunk_bytes, nslots, max_channels, timeout_s,
        split_steps, ll128_bytes, resident_us, resident_blocks, resident_max_bytes, resident_copy_max_bytes,
        exchange_channel_bytes, exchange_ll_bytes, exchange_drain, exchange_slots, exchange_rounds)."""
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
        cfg.exchange_ll_bytes = config.exchange_ll_bytes
        cfg.exchange_drain = _DRAINS[config.exchange_drain]
        cfg.exchange_slots = _SLOTS[config.exchange_slots]
        cfg.exchange_rounds = _ROUNDS[config.exchange_rounds]
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

    def exchange(self, int coll, uintptr_t send, uintptr_t recv, send_bytes, send_off, recv_bytes, recv_off,
                 uintptr_t stream, bint sync, shapes=None, then=None):
        """The all-to-all family's exchange (mg_exchange) for collective `coll` (its code): send_bytes[p] bytes from send + send_off[p]
        to rank p, recv_bytes[p] bytes from rank p into recv + recv_off[p]; with `sync`, returns with
        the result (GIL released), else enqueued on `stream` as run() does. `shapes`: None, or (send,
        recv) lists of a layout (mpigpu._describe.datatypes.Layout, regular) or None per rank: that block is
        packed bytes of the datatype, send_off/recv_off its first instance's displacement. `then`:
        None, or the reduction that follows, (dtype, op, dst, src, row_bytes, nrows, count)."""
        cdef ExchangeCall c
        self._exchange_call(&c, coll, send, recv, send_bytes, send_off, recv_bytes, recv_off, shapes, then)
        if sync:
            self.run_exchange(&c.x, stream)
        else:
            check(mg_exchange(self.t, &c.x, stream, 1), 'exchange launch')

    cpdef uint64_t exchange_request(self, int coll, uintptr_t send, uintptr_t recv, send_bytes, send_off, recv_bytes,
                                    recv_off, uintptr_t stream, uintptr_t request, bint watch,
                                    shapes=None, then=None) except? 0:
        """The exchange (as exchange()) enqueued on `stream`, with the generalized request that
        completes after it (its handle written at address `request`), as run_request: returns the
        request's ticket; a fault completes the request with the fault's code. The device is current."""
        cdef uint64_t ticket = 0
        cdef ExchangeCall c
        self._exchange_call(&c, coll, send, recv, send_bytes, send_off, recv_bytes, recv_off, shapes, then)
        check(mg_exchange_request(self.t, &c.x, stream, <void *>request, watch, &ticket), 'exchange request')
        return ticket

    cdef int _exchange_call(self, ExchangeCall *c, int coll, uintptr_t send, uintptr_t recv, send_bytes, send_off,
                            recv_bytes, recv_off, shapes, then) except -1:
        """Fills c from per-rank lists, shapes and the reduction that follows (exchange, exchange_request)."""
        cdef int r, n = len(send_bytes)
        cdef mg_exchange_call *x = &c.x
        if self.t == NULL:
            raise DeviceError(MG_ERR_TEAM, 'exchange on a released team')
        if n > MG_MAX_RANKS or len(send_off) != n or len(recv_bytes) != n or len(recv_off) != n:
            raise DeviceError(MG_ERR_ARG, f'exchange: {n} ranks of byte ranges (at most {MG_MAX_RANKS})')
        memset(x, 0, sizeof(mg_exchange_call))
        x.coll = coll
        x.send, x.recv = send, recv
        for r in range(n):
            x.send_bytes[r], x.send_off[r] = send_bytes[r], send_off[r]
            x.recv_bytes[r], x.recv_off[r] = recv_bytes[r], recv_off[r]
        _shapes(x, shapes, c.send_shape, c.recv_shape)
        _then(x, then, &c.then)
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

    cdef int launch_exchange(self, const mg_exchange_call *x, uintptr_t stream) except -1:
        """An exchange enqueued on `stream` (the stream= form) of a team that is up."""
        if self.t == NULL:
            raise DeviceError(MG_ERR_TEAM, 'exchange on a released team')
        check(mg_exchange(self.t, x, stream, 1), 'exchange launch')
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


include "_requests.pxi"
include "_arrays.pxi"
include "_fast.pxi"
include "_pmpi_entry.pxi"
include "_pack.pxi"
include "_exchange.pxi"
include "_p2p.pxi"
