"""The mirrored path: any mpi4py buffer method with device buffers, run unchanged on whole pinned host
mirrors of the buffers.

The honest path for every buffer method the device engine does not implement (the v-collectives,
Alltoall(v,w), Scan, neighbourhood collectives, intercommunicator collectives, matched receives,
Pack/Unpack, File I/O, RMA origin buffers, derived datatypes...). Each device buffer gets a pinned host
mirror with the same bytes and element type; inputs are copied in after the producer's stream; the
unchanged mpi4py method runs on the mirrors, so counts, displacements and datatypes of buffer
specifications mean exactly what they mean to mpi4py; outputs are copied back once MPI is done with
them. Every mirror is copied in (outputs too), so the parts MPI does not write stay unchanged. A
buffer given with a derived datatype is mirrored as the instances the call reaches, packed on the GPU
(mpigpu/_paths/support/packing.py), with its specification rewritten to read them.

- run: blocking methods; per-thread mirrors reused from call to call.
- start: non-blocking methods: mpi4py's method starts on mirrors from a pool, and the request it returns
  completes (through mpigpu's generalized requests) once MPI is done and the outputs are back.
- Persistent, Partitioned: persistent and partitioned requests (`*_init`, `Psend_init`,
  `Precv_init`): mpi4py's request on mirrors held as long as it; each Start copies the inputs in and
  points this request at a generalized request completed once the round is done and its outputs are
  back; Pready and Parrived move one partition.
No collective setup happens here.
"""
import threading

import numpy as np
from mpi4py import MPI

from .. import _cuda
from .._state import undecided as _undecided
from .._describe.call import read_whole, within
from .._base.codes import Dtype
from .._base.types import HOST_FLOAT16
from .._ext._intake import is_device
from ..errors import Error
from .support import packing
from .._state import requests
from .support.pinned import Stager, give, take

IN, OUT, INOUT = 1, 2, 3  # how a call uses a buffer argument
# Element types host MPI cannot reduce as mpi4py would read them: bfloat16 (its mirror is raw uint16),
# float16 where host MPI has no such type.
_UNREDUCIBLE = frozenset((Dtype.BFLOAT16,) if HOST_FLOAT16 else (Dtype.FLOAT16, Dtype.BFLOAT16))
_ONE_BLOCK = (packing.SIMPLE, 0)
WHOLE = None  # the form of an item mirrored whole, its specification as given (never packed)


def split_spec(value):
    """(buffer object, the rest of a buffer specification or None)."""
    if type(value) in (list, tuple):
        return value[0], list(value[1:])
    return value, None


def host_view(arr, nbytes, typestr):
    """The first nbytes of uint8 array `arr` as elements of NumPy type `typestr`, as mpi4py reads them."""
    view = arr[:nbytes]
    dt = np.dtype(typestr)
    return view.view(dt) if nbytes % dt.itemsize == 0 else view


def _is_mirrored(value):
    return value is not None and value is not MPI.IN_PLACE and is_device(value)


class _Mirror:
    """One device buffer argument and its pinned host mirror: of the whole buffer, or of the instances
    its derived datatype reaches, packed on the GPU (`packing`)."""
    __slots__ = ('buf', 'device', 'pinned', 'host', 'role', 'pooled', 'packing')

    def __init__(self, st, name, label, value, role, reduces, pooled, tag, form):
        obj, rest = split_spec(value)
        buf = self.buf = read_whole(name, label, st.rank, obj, role != IN, _cuda.consumer_stream)
        self.device = _cuda.device_of(name, label, st.rank, buf)
        self.packing = None if rest is None or form is WHOLE else packing.plan(
            name, label, st.rank, buf, self.device, rest, form, reduces)
        if self.packing is None and rest is not None:
            buf = self.buf = trusted(name, label, st.rank, buf, rest, _ONE_BLOCK if form is WHOLE else form)
        code = buf.dtype if self.packing is None else self.packing.code
        if reduces and code in _UNREDUCIBLE:
            raise Error(name, f'host MPI cannot reduce {Dtype(code).name.lower()}; only Allreduce, Reduce and '
                        'Reduce_scatter_block with device buffers on every rank reduce it (on the device)',
                        arg=label, rank=st.rank, error_class=MPI.ERR_TYPE)
        nbytes = buf.nbytes if self.packing is None else self.packing.nbytes
        self.role, self.pooled = role, pooled
        if pooled:
            self.pinned = take(nbytes)
            arr = np.frombuffer(self.pinned, dtype=np.uint8)
        else:
            self.pinned, arr = st.owned(Stager).on(self.device).host(f'mirror{tag}', nbytes)
        if self.packing is not None:
            self.host = [arr[:nbytes], *self.packing.rest]
        else:
            host = host_view(arr, nbytes, buf.typestr)
            self.host = host if rest is None else [host, *rest]

    def copy_in(self, st, ordered, offset=0, nbytes=None):
        """Device bytes to the mirror, after the buffer's producer stream (ordered: streams done); a
        packed mirror is packed whole."""
        if self.packing is not None:
            self.packing.pack(self.pinned.ptr)
            return
        nbytes = self.buf.nbytes - offset if nbytes is None else nbytes
        if not nbytes:
            return
        sg = st.owned(Stager).on(self.device)
        stream = _cuda.stream_of(self.buf, self.device)

        def copy():
            if stream not in ordered:
                sg.after(stream)
                ordered.add(stream)
            sg.to_host(self.pinned.ptr + offset, self.buf.ptr + offset, nbytes)
        _cuda.with_device(self.device, copy)

    def copy_out(self, st, offset=0, nbytes=None):
        """The mirror's bytes back to the device buffer (outputs); a packed mirror is unpacked whole."""
        if self.role == IN:
            return
        if self.packing is not None:
            self.packing.unpack(self.pinned.ptr)
            return
        nbytes = self.buf.nbytes - offset if nbytes is None else nbytes
        if not nbytes:
            return
        sg = st.owned(Stager).on(self.device)
        _cuda.with_device(self.device, sg.to_device, self.buf.ptr + offset, self.pinned.ptr + offset, nbytes)

    def release(self):
        if self.pooled and self.pinned is not None:
            give(self.pinned)
            self.pinned = None


def trusted(name, label, rank, buf, rest, form):
    """Device buffer `buf` as far as specification `rest` reaches (read as `form`): an explicit count
    and datatype are trusted as MPI trusts them, past the length of the object that carries the
    address (a view shorter than its storage) but within the device allocation, where a host mirror
    must hold them all; past the allocation, an error naming the call (a mirror of the buffer's length
    would let host MPI write past it)."""
    span = packing.reach(name, label, rank, rest, form, buf.itemsize)
    if span is None or (span[0] >= 0 and span[1] <= buf.nbytes):
        return buf
    lo, hi = span
    within(name, label, rank, buf, lo, hi, 'the count and datatype', MPI.ERR_COUNT)
    if lo < 0:
        raise Error(name, f'the count and datatype reach {-lo} bytes before the buffer\'s address, which host '
                    'MPI cannot be given through a mirror; describe the region from its lowest byte',
                    arg=label, rank=rank, error_class=MPI.ERR_BUFFER)
    return buf.view(0, hi, buf.dtype)


def _label(i, n):
    return ('sendbuf', 'recvbuf', 'buf')[min(i, 1)] if n > 1 else 'buf'


def mirror_all(st, name, items, reduces, pooled):
    """(host arguments, mirrors) for items: (value, role) or (value, role, form) per buffer argument,
    form as packing.form_of gives it (a simple message of one block when absent; WHOLE: not packed)."""
    tag = threading.get_ident()
    hosts, mirrors, ordered = [], [], set()
    try:
        for i, item in enumerate(items):
            value, role = item[0], item[1]
            if not _is_mirrored(value):
                hosts.append(value)
                continue
            form = item[2] if len(item) > 2 else _ONE_BLOCK
            m = _Mirror(st, name, _label(i, len(items)), value, role, reduces, pooled, f'{i}-{tag}', form)
            mirrors.append(m)
            m.copy_in(st, ordered)
            hosts.append(m.host)
    except BaseException:
        for m in mirrors:
            m.release()
        raise
    return hosts, mirrors


def run(st, name, fn, items, reduces=False):
    """Runs fn(*host arguments) on mirrors of the device buffers among items ((value, role) per buffer
    argument, in fn's order), then copies the outputs back; returns what fn returns."""
    _cuda.require(name, st.rank)
    with _cuda.errors_as(name, st.rank):
        hosts, mirrors = mirror_all(st, name, items, reduces, pooled=False)
        result = fn(*hosts)
        for m in mirrors:
            m.copy_out(st)
        return result


def start(st, name, fn, items, reduces=False, receive=False):
    """The non-blocking form: fn(*host arguments) starts the host MPI operation on pooled mirrors and
    returns its request; the request returned here completes once that one has and the outputs are
    back on the device. `receive`: its status reports the receive's source, tag and count."""
    _cuda.require(name, st.rank)
    with _cuda.errors_as(name, st.rank):
        hosts, mirrors = mirror_all(st, name, items, reduces, pooled=True)
        try:
            inner = fn(*hosts)
        except BaseException:
            for m in mirrors:
                m.release()
            raise

        def done():
            try:
                with _cuda.errors_as(name, st.rank):
                    for m in mirrors:
                        m.copy_out(st)
            finally:
                for m in mirrors:
                    m.release()
        work = requests.Work(None, inner=inner, on_done=done, receive=receive)
        return requests.start(work)


def split_collective(st, owner, name, call, items, begin):
    """A split collective of File (`Read_all_begin` ... `Read_all_end`): the begin call runs on pooled
    mirrors, which `owner` keeps until the end call, which runs on them and copies the outputs back."""
    _cuda.require(name, st.rank)
    with _cuda.errors_as(name, st.rank):
        if begin:
            hosts, mirrors = mirror_all(st, name, items, False, pooled=True)
            try:
                result = call(*hosts)
            except BaseException:
                for m in mirrors:
                    m.release()
                raise
            owner.__dict__['_mirrored_split'] = (hosts, mirrors)
            return result
        hosts, mirrors = owner.__dict__.pop('_mirrored_split', (None, None))
        if mirrors is None:
            raise Error(name, 'no split collective on device memory was begun on this file', arg='buf',
                        rank=st.rank, error_class=MPI.ERR_OTHER)
        try:
            result = call(*hosts)
            for m in mirrors:
                m.copy_out(st)
            return result
        finally:
            for m in mirrors:
                m.release()


class Persistent(requests.Startable, requests.Finishing, MPI.Prequest):
    """A persistent request (`Send_init`, `Gatherv_init`, ...) on device buffers: mpi4py's persistent
    request on pinned mirrors held as long as this one. Start copies the inputs in and starts it; the
    round completes, through a generalized request, once MPI is done and the outputs are back, so
    mpi4py's class-level Waitall & co. complete it with its results in place. MPI.Prequest.Startall
    starts it where MPI is mpigpu's (requests.Prequest); mpi4py's own Startall knows MPI's persistent
    requests only, and raises for this one rather than run it on stale inputs."""

    @classmethod
    def create(cls, st, name, init, items, reduces=False):
        _cuda.require(name, st.rank)
        with _cuda.errors_as(name, st.rank):
            hosts, mirrors = mirror_all(st, name, items, reduces, pooled=True)
        try:
            host = init(*hosts)
        except BaseException:
            for m in mirrors:
                m.release()
            raise
        req = cls()
        req._st, req._name, req._mirrors, req._host = st, name, mirrors, host
        req._work = None
        return req

    def _copy_in(self):
        ordered = set()
        for m in self._mirrors:
            if m.role != OUT:
                m.copy_in(self._st, ordered)

    _host = None

    def _freed(self):
        return self._host is None

    def Start(self):
        self._check_startable(self._st.rank)
        st, name = self._st, self._name
        if _undecided.unsettled and _undecided.ordered(name):  # a collective: after the undecided calls
            st.agreement.settle_before(name)
        with _cuda.errors_as(name, st.rank):
            self._copy_in()
        self._host.Start()

        def done():
            with _cuda.errors_as(name, st.rank):
                for m in self._mirrors:
                    m.copy_out(st)
        self._work = requests.Work(None, inner=self._host, on_done=done, receive=True)
        requests.set_handle(self, requests.start(self._work))

    def Free(self):
        if self._active():
            self.Wait()
        if self._host is not None:
            self._host.Free()
            self._host = None
        for m in self._mirrors:
            m.release()
        self._mirrors = []


class Partitioned(Persistent):
    """A partitioned send or receive (`Psend_init`, `Precv_init`) on a device buffer: Pready copies its
    partition to the mirror before MPI may send it; Parrived copies an arrived partition back; the
    round's completion copies the whole receive buffer back."""

    @classmethod
    def create(cls, st, name, init, value, partitions, sends):
        req = super().create(st, name, init, [(value, IN if sends else OUT)])
        req._partitions, req._sends = partitions, sends
        return req

    def _copy_in(self):
        pass  # a send's partitions are copied as they become ready (Pready)

    def _span(self, partition):
        m = self._mirrors[0]
        whole = m.buf.nbytes if split_spec(m.host)[1] is None else None
        if whole is None or self._partitions <= 0:
            return 0, m.buf.nbytes  # a specification's partitions: the whole buffer (still correct)
        size = whole // self._partitions
        return partition * size, size

    def Pready(self, partition):
        if self._mirrors:
            with _cuda.errors_as(self._name, self._st.rank):
                offset, nbytes = self._span(partition)
                self._mirrors[0].copy_in(self._st, set(), offset, nbytes)
        self._host.Pready(partition)

    def Pready_range(self, partition_low, partition_high):
        for p in range(partition_low, partition_high + 1):
            self.Pready(p)

    def Pready_list(self, partitions):
        for p in partitions:
            self.Pready(p)

    def Parrived(self, partition):
        arrived = self._host.Parrived(partition)
        if arrived and self._mirrors:
            with _cuda.errors_as(self._name, self._st.rank):
                offset, nbytes = self._span(partition)
                self._mirrors[0].copy_out(self._st, offset, nbytes)
        return arrived
