"""MPI calls made below Python, run on mpigpu's paths.

The interposer hands each call from below Python (not mpi4py's own) to `dispatch`: its function's index
in the table, the call's parameters as words and which of its buffers are device memory (a mask). Each
becomes the mpi4py method call of the same name on mpigpu's communicator for the handle: every buffer
with its count (or counts and displacements) and datatype folded into a buffer specification, as mpi4py
writes one, over the memory the count reaches (device memory as a `__cuda_array_interface__` object,
host memory as a ctypes array); the other parameters in C order; a status filled in, a request's handle
written back. So a C caller gets what a
Python caller of the same method gets: the engine within a node, MPI's semantics everywhere.

The five engine collectives with device buffers first try the engine's own entry (`_device`'s
_pmpi_entry.pxi, registered with the interposer at install): it reads the call from its words in C and
runs it as the fast path runs the same call from Python, on what this handler binds (the communicator
wrappers it keeps, the predefined datatypes); a call it does not take comes here.

Errors go back as MPI errors: an error code whose string names the call, the rank and the reason,
raised through the communicator's error handler (a C caller's MPI_ERRORS_ARE_FATAL ends the job with
that message; MPI_ERRORS_RETURN returns it, and MPI_Error_string gives the text).
"""
import atexit
import ctypes

from mpi4py import MPI

from .. import _cuda, _interpose
from . import comm as _comm, methods as _methods, objects as _objects
from .interposed_requests import Requests
from .._base.codes import ENGINE_COLLS, TYPESTR_CODES
from .._state.comm_state import attached, state_of
from .._base.types import FROM_MPI
from .._state.requests import Startable
from .._state.undecided import unsettled
from .._interpose.functions import TABLE

_TYPESTRS = {code: typestr for typestr, code in TYPESTR_CODES.items()}  # dtype code -> a CAI typestr

_WORD = (1 << (8 * ctypes.sizeof(ctypes.c_void_p))) - 1  # the words arrive signed: read them unsigned
_IN_PLACE = (1, _WORD)                                   # MPI_IN_PLACE: Open MPI's, MPICH's
_STATUS_IGNORE = (0, 1)                                              # MPI_STATUS_IGNORE: Open MPI's, MPICH's
# collectives whose counts are the local group's on an intercommunicator (the handler refuses them there)
_LOCAL_COUNTS = frozenset(('Reduce_scatter', 'Ireduce_scatter'))
_HANDLER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_ssize_t), ctypes.c_uint)
_ENGINE_COLLS = {c.mpi_name: int(c) for c in ENGINE_COLLS}


class DeviceMemory:
    """Device memory at an address for mpigpu's intake (CAI v3; the caller's stream work is done, as MPI
    requires of a C caller, so no stream to wait for): `count` elements of a predefined type's typestr
    (the form mpigpu's fast paths take), or bytes under a buffer specification."""
    __slots__ = ('__cuda_array_interface__',)

    def __init__(self, ptr, count, typestr, readonly):
        self.__cuda_array_interface__ = {'shape': (count,), 'typestr': typestr, 'data': (ptr, readonly),
                                         'strides': None, 'version': 3, 'stream': None}


class Handler:
    """The registered handler: the interposer's library, the handle sizes of the MPI below, what is kept
    between calls (predefined datatypes, the communicator wrappers)."""

    def __init__(self, lib):
        self.lib = lib
        # by name: under `python -m mpigpu` the drop-in replaces MPI.Comm's class after this is made
        self.handle_bits = {cls.__name__: 8 * MPI._sizeof(cls) for cls in (MPI.Comm, MPI.Datatype, MPI.Op, MPI.Win)}
        self.datatype_words = 4 if MPI._sizeof(MPI.Datatype) == 4 else 8
        self.cfunc = _HANDLER(self.dispatch)
        self.calls = 0  # device calls handled (interposer_status() reports it)
        self.types = {}  # datatype handle -> (MPI.Datatype, extent, true lb, true extent, typestr or None)
        self.comms = {}  # communicator handle -> (mpigpu's wrapper, its state)
        self.windows = {}  # window handle -> mpigpu's Win, which keeps its RMA operations' host copies
        self.ops = {}  # predefined op handle -> MPI.Op
        self.engine_entry = None  # the CUDA layer whose entry is registered (install), or None
        self.requests = None  # the persistent requests made below Python and their request calls (install)

    def handle(self, cls, word):
        """A handle word as mpi4py writes that handle: MPICH's C int sign-extended to an unsigned 64-bit
        value (mpi4py's `.handle` of a communicator made by MPICH is 0xffffffff84000000), Open MPI's pointer
        as is."""
        bits = self.handle_bits[cls.__name__]
        if bits < 64:
            word &= (1 << bits) - 1
            if word >= 1 << (bits - 1):
                word |= ((1 << 64) - 1) ^ ((1 << bits) - 1)
        return word & ((1 << 64) - 1)

    def datatype(self, word):
        """(datatype, extent, true lb, true extent, typestr of a predefined type mpigpu moves, or None)."""
        h = self.handle(MPI.Datatype, word)
        known = self.types.get(h)
        if known is None:
            dt = MPI.Datatype.fromhandle(h)
            code = FROM_MPI.get(h)
            typestr = _TYPESTRS.get(int(code)) if code is not None else None
            known = (dt, dt.Get_extent()[1]) + tuple(dt.Get_true_extent()) + (typestr,)
            if not dt.is_predefined:
                return known  # a user's type: its handle may be freed and reused, so not kept
            self.types[h] = known
        return known

    def op(self, word):
        h = self.handle(MPI.Op, word)
        op = self.ops.get(h)
        if op is None:
            op = MPI.Op.fromhandle(h)
            if op.is_predefined:  # a user's op may be freed and its handle reused: not kept
                self.ops[h] = op
        return op

    def communicator(self, word):
        """mpigpu's communicator on the handle, its state bound (so the fast paths find it). The wrapper of
        an earlier call is kept while the handle's state is the same object: the state is an MPI attribute,
        deleted when the communicator is freed, so a handle that comes back as another communicator
        gets a new one."""
        h = self.handle(MPI.Comm, word)
        kept = self.comms.get(h)
        if kept is not None and attached(kept[0]) is kept[1]:
            return kept[0]
        comm = _comm.Comm.fromhandle(h)
        self.comms[h] = (comm, state_of(comm))
        return comm

    def window(self, word):
        """mpigpu's Win on the handle: one object per handle, kept, since it holds the host copies of the
        window's RMA operations until their epoch's synchronization (a later call on the same handle
        completes them). A freed window's handle that comes back names the new window: the object only
        wraps the handle, and a freed window has nothing pending (MPI requires its epochs closed)."""
        h = self.handle(MPI.Win, word)
        win = self.windows.get(h)
        if win is None:
            win = self.windows[h] = _objects.Win.fromhandle(h)
        return win

    def dispatch(self, index, words, mask):
        fn = TABLE[index]
        self.calls += 1
        comm = None
        try:
            args = [w & _WORD for w in words[:len(fn.params)]]
            comm = self.communicator(args[fn.comm]) if fn.comm >= 0 else None
            if fn.win >= 0:
                comm = self.window(args[fn.win])
                return Call(self, fn, args, None, mask).one_sided(comm)
            return Call(self, fn, args, comm, mask).run()
        except BaseException as exc:  # every failure goes back to the C caller as an MPI error
            return _fail(fn, comm, exc)
        finally:
            if self.engine_entry is not None:  # a verdict the engine's entry handed this call is taken by now
                self.engine_entry.pmpi_handoff_end()


class Call:
    """One intercepted call turned into its mpi4py method call. `mask`: bit b set where the function's
    b-th buffer is device memory (the interposer looked)."""

    def __init__(self, handler, fn, args, comm, mask):
        self.h, self.fn, self.args, self.comm, self.mask = handler, fn, args, comm, mask
        self.size = self.rank = 0
        self.inter = False
        if comm is not None:
            self.inter = comm.Is_inter()
            self.size = comm.Get_remote_size() if self.inter else comm.Get_size()
            self.rank = comm.Get_rank()
            if self.inter and fn.method in _LOCAL_COUNTS:
                raise NotImplementedError(f'MPI_{fn.name} on an intercommunicator below Python')
        self.in_place = bool(fn.buffers) and args[fn.buffers[0]] in _IN_PLACE

    def significant(self, param):
        """Whether a root-only buffer is read on this rank: the root's own, or on an intercommunicator the
        root's group's one rank that passes MPI_ROOT."""
        root = self.value('root')
        return root == MPI.ROOT if self.inter else root == self.rank

    def group_size(self, group):
        """How many entries a count array has: the communicator's (remote) size, or a topology's degree."""
        if group == 'n':
            return self.size
        indegree, outdegree = self.comm.degrees
        return indegree if group == 'in' else outdegree

    def array(self, name, length):
        """An array parameter's `length` entries (ints, MPI_Counts, MPI_Aints, datatypes)."""
        i = self.fn.index[name]
        kind, word = self.fn.params[i].kind, self.args[i]
        if not word:
            return None
        if kind == 'ints':
            return list((ctypes.c_int * length).from_address(word))
        if kind == 'aints':
            return list((ctypes.c_ssize_t * length).from_address(word))
        if kind == 'counts':
            return list((ctypes.c_int64 * length).from_address(word))
        raw = ((ctypes.c_int if self.h.datatype_words == 4 else ctypes.c_ssize_t) * length).from_address(word)
        return [MPI.Datatype.fromhandle(self.h.handle(MPI.Datatype, w)) for w in raw]

    def value(self, name):
        i = self.fn.index[name]
        kind = self.fn.params[i].kind
        word = self.args[i]
        if kind == 'int':
            word &= 0xFFFFFFFF
            return word - (1 << 32) if word >= 1 << 31 else word
        if kind in ('count', 'aint'):  # an MPI_Count or MPI_Aint: 64 bits, signed
            return word - (1 << 64) if word >= 1 << 63 else word
        if kind in ('ints', 'counts', 'aints', 'types'):
            return self.array(name, self.size)
        if kind == 'type':
            return self.h.datatype(word)[0]
        if kind == 'op':
            return self.h.op(word)
        return word

    def spec(self, b, typed=True):
        """The argument of the function's b-th buffer: a typed device array where the datatype is a
        predefined one mpigpu moves (what mpigpu's fast paths take; not where `typed` is false: the caller's
        datatype itself then, as a one-sided call's origin must match its target's), else an mpi4py buffer
        specification (or MPI.IN_PLACE, or None)."""
        fn = self.fn
        i = fn.buffers[b]
        param, ptr = fn.params[i], self.args[i]
        if ptr in _IN_PLACE:
            return MPI.IN_PLACE
        if param.root_only and not self.significant(param):
            return None
        device = bool(self.mask >> b & 1)
        form = param.forms[1 if self.in_place and len(param.forms) > 1 else 0]
        if form.form in ('simple', 'times_n', 'times_p', 'one'):
            dtype, extent, true_lb, true_extent, typestr = self.h.datatype(self.args[fn.index[form.type]])
            count = 1 if form.form == 'one' else self.value(form.count)
            blocks = count * (self.group_size(form.group) if form.form == 'times_n' else
                              self.value(form.factor) if form.form == 'times_p' else 1)
            if device and typestr is not None and typed:
                return DeviceMemory(ptr, blocks, typestr, param.kind == 'in')
            nbytes = _reach([(0, blocks, (extent, true_lb, true_extent))])
            # (a partitioned call's specification counts every partition's elements, as mpi4py reads it)
            return [self.memory(ptr, nbytes, param, device), blocks if form.form == 'times_p' else count, dtype]
        length = self.group_size(form.group)
        counts = self.array(form.count, length)
        if form.form in ('sum', 'own'):
            dtype = self.value(form.type)
            count = sum(counts) if form.form == 'sum' else counts[self.rank]
            return [self.memory(ptr, count * dtype.Get_extent()[1], param, device), dtype]
        displs = self.array(form.displs, length)
        dtype = self.value(form.type) if form.form == 'v' else self.array(form.type, length)
        if form.form == 'v':
            shape = _shape(dtype)
            nbytes = _reach([(d * shape[0], c, shape) for c, d in zip(counts, displs)])
        else:  # w: byte displacements, a datatype each
            nbytes = _reach([(d, c, _shape(t)) for c, d, t in zip(counts, displs, dtype)])
        return [self.memory(ptr, nbytes, param, device), (counts, displs), dtype]

    @staticmethod
    def memory(ptr, nbytes, param, device):
        if not ptr:
            if nbytes:
                raise ValueError(f'{param.name}: a null pointer with {nbytes} bytes to reach')
            return None
        if device:
            return DeviceMemory(ptr, nbytes, '|u1', param.kind == 'in')
        return (ctypes.c_char * nbytes).from_address(ptr)

    def run(self):
        if self.fn.method in ('Pack', 'Unpack'):
            return self.packing()
        fn, positional, b = self.fn, [], 0
        status = None
        for i, p in enumerate(fn.params):
            if p.is_buffer:
                positional.append(self.spec(b))
                b += 1
            elif i == fn.status:
                status = MPI.Status() if self.args[i] not in _STATUS_IGNORE else None
            elif p.kind in ('comm', 'request', 'info', 'message') or p.name in fn.folded:
                continue  # (an info's hints are not read: MPI lets an implementation ignore them)
            elif p.kind == 'op' and fn.comm < 0:
                continue  # MPI_Reduce_local: the op is the receiver
            else:
                positional.append(self.value(p.name))
        if fn.find('message') >= 0:
            result = self.matched(positional, status)
        elif fn.comm < 0:
            result = self.value('op').Reduce_local(*positional)
        else:
            method = getattr(self.comm, fn.method)
            result = method(*positional, status=status) if status is not None else method(*positional)
        if status is not None:
            ctypes.memmove(self.args[fn.status], MPI._addressof(status), MPI._sizeof(MPI.Status))
        if fn.request >= 0 and isinstance(result, Startable):  # mpigpu's persistent request: a proxy stands for it
            self.h.requests.hand_out(result, self.comm, self.args[fn.request])
        elif fn.request >= 0:
            ctypes.memmove(self.args[fn.request], MPI._addressof(result), MPI._sizeof(MPI.Request))
        return MPI.SUCCESS

    def one_sided(self, win):
        """An RMA operation as mpigpu's Win makes it (a device origin's host copy kept until the epoch's
        synchronization), or a synchronization, which copies back what the completed operations wrote."""
        fn = self.fn
        if fn.method.startswith('Win_'):  # Win_fence -> Fence, Win_unlock_all -> Unlock_all, ...
            method = getattr(win, fn.method[len('Win_'):].capitalize())
            method(*(self.value(p.name) for p in fn.params if p.kind == 'int'))
            return MPI.SUCCESS
        rank = self.value('target_rank')
        origin = self.spec(0, typed=False) if self.args[fn.buffers[0]] else self.no_origin()
        if fn.method == 'Fetch_and_op':
            win.Fetch_and_op(origin, self.spec(1, typed=False), rank, self.value('target_disp'), self.value('op'))
            return MPI.SUCCESS
        if fn.method == 'Compare_and_swap':
            win.Compare_and_swap(origin, self.spec(1, typed=False), self.spec(2, typed=False), rank,
                                 self.value('target_disp'))
            return MPI.SUCCESS
        target = (self.value('target_disp'), self.value('target_count'), self.value('target_datatype'))
        method = getattr(win, fn.method)
        if fn.method in ('Put', 'Get', 'Rput', 'Rget'):
            result = method(origin, rank, target)
        elif fn.method in ('Accumulate', 'Raccumulate'):
            result = method(origin, rank, target, self.value('op'))
        else:
            result = method(origin, self.spec(1, typed=False), rank, target, self.value('op'))
        if fn.request >= 0:  # (Rput & co.) the library's MPI_Wait completes it: a generalized request
            ctypes.memmove(self.args[fn.request], MPI._addressof(result), MPI._sizeof(MPI.Request))
        return MPI.SUCCESS

    def no_origin(self):
        """A null origin (MPI_NO_OP's, which MPI does not read: Fetch_and_op and Get_accumulate as an atomic
        read) as a host buffer of its count's elements, since mpi4py requires one."""
        form = self.fn.params[self.fn.buffers[0]].forms[0]
        dtype = self.value(form.type)
        count = 1 if form.form == 'one' else self.value(form.count)
        return [bytearray(max(count * dtype.Get_extent()[1], 1)), count, dtype]

    def matched(self, positional, status):
        """MPI_Mrecv and MPI_Imrecv: the caller's message (from its own MPI_Mprobe or MPI_Improbe) received by
        mpigpu's Message, a device buffer as mpigpu's point-to-point takes one; the caller's handle then
        holds what the receive left in it (MPI_MESSAGE_NULL), as MPI sets it."""
        at, size = self.args[self.fn.find('message')], MPI._sizeof(MPI.Message)
        msg = _objects.Message()
        ctypes.memmove(MPI._addressof(msg), at, size)
        result = msg.Recv(*positional, status) if self.fn.method == 'Mrecv' else msg.Irecv(*positional)
        ctypes.memmove(at, MPI._addressof(msg), size)
        return result

    def packing(self):
        """MPI_Pack and MPI_Unpack as mpigpu's Datatype.Pack and Unpack make them (on the GPU where both
        buffers are device memory): mpi4py counts a buffer's elements as its bytes over the datatype's
        extent, so the typed side is given count x extent bytes, and the packed side its size in bytes;
        the position is read from and written back to the caller's int (MPI_Count: Pack_c, Unpack_c)."""
        fn = self.fn
        dtype = self.value('datatype')
        extent = dtype.Get_extent()[1]
        wide = fn.params[fn.index['position']].kind == 'countp'
        position = (ctypes.c_int64 if wide else ctypes.c_int).from_address(self.args[fn.index['position']])
        sides = []
        for b, i in enumerate(fn.buffers):
            param, form = fn.params[i], fn.params[i].forms[0]
            nbytes = self.value(form.count) * (extent if form.type else 1)
            sides.append(self.memory(self.args[i], nbytes, param, bool(self.mask >> b & 1)))
        if fn.method == 'Pack':
            position.value = _objects.Datatype.Pack(dtype, sides[0], sides[1], position.value, self.comm)
        else:
            position.value = _objects.Datatype.Unpack(dtype, sides[0], position.value, sides[1], self.comm)
        return MPI.SUCCESS


def _shape(dtype):
    return (dtype.Get_extent()[1],) + tuple(dtype.Get_true_extent())


def _reach(pieces):
    """Bytes from a buffer's address to the end of the last element of (byte offset, count, (extent,
    true lb, true extent) of the datatype)."""
    end = 0
    for offset, count, (extent, true_lb, true_extent) in pieces:
        if count <= 0:
            continue
        if true_lb < 0 or offset < 0 or extent < 0:
            raise ValueError('a datatype or displacement that reaches below the buffer\'s address')
        end = max(end, offset + (count - 1) * extent + true_lb + true_extent)
    return end


_error_class = None
_error_codes = {}   # message -> its error code (an MPI library has a few thousand codes: made once each)
_MAX_CODES = 256    # then MPI.ERR_OTHER


def _code_for(message):
    global _error_class
    code = _error_codes.get(message)
    if code is None:
        if len(_error_codes) >= _MAX_CODES:
            return MPI.ERR_OTHER
        if _error_class is None:
            _error_class = MPI.Add_error_class()
        code = MPI.Add_error_code(_error_class)
        MPI.Add_error_string(code, message)
        _error_codes[message] = code
    return code


def _fail(fn, comm, exc):
    """exc as an MPI error code (one carrying its message, or MPI's own), through the handler of comm (a
    communicator, or a one-sided call's window); never raises (an exception cannot cross back into the C
    caller)."""
    try:
        if isinstance(exc, MPI.Exception):
            code = exc.Get_error_code()
        else:
            rank = (comm.Get_rank() if isinstance(comm, MPI.Comm) else comm.Get_group().Get_rank()
                    if comm is not None else MPI.COMM_WORLD.Get_rank())
            code = _code_for(f'MPI_{fn.name} on rank {rank}: {type(exc).__name__}: {exc} (mpigpu)')
        if comm is not None:
            comm.Call_errhandler(code)
        return code
    except BaseException:
        return MPI.ERR_OTHER


# sends whose host buffers mpigpu's methods hand to mpi4py as they are (the receives may meet mpigpu's
# point-to-point protocol: the handler's)
_PLAIN_SENDS = frozenset(('Send', 'Bsend', 'Ssend', 'Rsend', 'Isend', 'Ibsend', 'Issend', 'Irsend'))


def host_rule(device, fid, comm):
    """What a host-buffer call of TABLE[fid] on `comm` needs before the library makes it, as mpigpu's method
    of that name does it (the engine's entry asks once per communicator class): the collective code the
    method posts for its peers, nothing (the sends; a generated method that posts nothing), or the
    handler (a method of its own)."""
    name = TABLE[fid].method
    if name in _PLAIN_SENDS:
        return device.PMPI_HOST_UNPOSTED
    posted = _methods.host_post(type(comm), name)
    if posted is None:
        return device.PMPI_HOST_HANDLER
    return posted if posted >= 0 else device.PMPI_HOST_UNPOSTED


def engine_row(fn):
    """What the engine's entry reads of function fn, an engine collective's (else None): (coll, send,
    recv, their bits in the device mask, the two counts' and two datatypes' parameter indices, op, root,
    comm; -1: none). Bcast's one buffer is its recv; the collectives with one count and one datatype give
    each twice."""
    coll = _ENGINE_COLLS.get(fn.name)
    if coll is None:
        return None
    ix = fn.index
    send, recv = (-1, ix['buffer']) if 'buffer' in ix else (ix['sendbuf'], ix['recvbuf'])
    bit = {param: b for b, param in enumerate(fn.buffers)}
    if 'sendcount' in ix:
        counts, types = (ix['sendcount'], ix['recvcount']), (ix['sendtype'], ix['recvtype'])
    else:
        count = ix['recvcount'] if 'recvcount' in ix else ix['count']
        counts, types = (count, count), (ix['datatype'], ix['datatype'])
    return (coll, send, recv, bit.get(send, -1), bit[recv]) + counts + types + (ix.get('op', -1), fn.root, fn.comm)


_installed = None


def calls():
    """Device calls the handler and the engine's entry have run in this process."""
    if _installed is None:
        return 0
    entry = _installed.engine_entry
    return _installed.calls + (entry.pmpi_entry_calls() if entry is not None else 0)


def report():
    """mpigpu.interposer_status(): whether the interposer is in place ('on', 'late', 'off', 'unavailable:
    <why>'), how many device calls its handler ran in this process, and whether the MPI library below it
    is CUDA-aware (None where it is not loaded)."""
    return {'state': _interpose.status(), 'handled_calls': calls(),
            'mpi_below_cuda_aware': _interpose.lower_cuda_aware()}


def install(lib):
    """Registers the handler with the interposer (once), and unregisters it before Python's teardown."""
    global _installed
    if _installed is not None:
        return
    _installed = Handler(lib)
    # mpi4py's own calls pass untouched: they come from mpigpu's paths, which routed them already
    inside = ctypes.cast(ctypes.CDLL(MPI.__file__).PyInit_MPI, ctypes.c_void_p)
    if lib.mpigpu_pmpi_pass_caller(inside) != 0:
        # without it mpi4py's calls would reach the handler and be made twice over: no handler then
        raise ImportError(f'mpigpu: the MPI interposer cannot find mpi4py\'s extension ({MPI.__file__}) in memory')
    lib.mpigpu_pmpi_set_handler(_installed.cfunc)
    atexit.register(lib.mpigpu_pmpi_set_handler, None)
    if hasattr(lib, 'mpigpu_pmpi_set_request_handler'):
        _installed.requests = Requests(lib, lambda fn, exc: _fail(fn, None, exc))
        atexit.register(_installed.requests.close)
    device = _cuda.device
    # the engine's entry (not without CUDA, nor on the CPU tests' fake layer, nor with an older library)
    if hasattr(device, 'bind_pmpi_entry') and hasattr(lib, 'mpigpu_pmpi_set_engine'):
        h = _installed
        bits = tuple(h.handle_bits[cls.__name__] for cls in (MPI.Comm, MPI.Datatype, MPI.Op))
        types = {handle: int(code) for handle, code in FROM_MPI.items()}
        rows = [engine_row(fn) or ((-1,) * 11 + (fn.comm,) if fn.comm >= 0 else None) for fn in TABLE]
        device.bind_pmpi_entry(rows, h.comms, types, unsettled, lambda fid, comm, exc: _fail(TABLE[fid], comm, exc),
                               bits, MPI.ERR_OTHER, lambda fid, comm: host_rule(device, fid, comm))
        for fid, row in enumerate(rows):  # the interposer asks the entry only for these
            if row is not None:
                lib.mpigpu_pmpi_engine_takes(fid)
        lib.mpigpu_pmpi_set_engine(ctypes.c_void_p(device.pmpi_entry_address()))
        atexit.register(lib.mpigpu_pmpi_set_engine, None)
        if hasattr(lib, 'mpigpu_pmpi_set_host_routes'):  # host calls posted in their wrappers where it can
            lib.mpigpu_pmpi_set_host_routes(ctypes.c_void_p(device.pmpi_host_routes_address()))
            atexit.register(lib.mpigpu_pmpi_set_host_routes, None)
        h.engine_entry = device
