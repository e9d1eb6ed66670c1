"""One call, one contract: any subset of ranks may pass device memory while the others pass host memory
in the same collective call, and the call gives MPI's result (mpigpu/_state/agree.py).

Every engine collective (Allreduce, Bcast, Reduce, Reduce_scatter_block, Allgather; out of place, in
place, zero counts, None off the root) x placement (all device, all host, the root only, the others
only, alternate ranks, one rank's send buffer on the device and receive buffer on the host and the
reverse) x form (blocking, non-blocking, persistent, stream= on the device ranks) on COMM_WORLD, a
split and a Cartesian communicator, each result compared with plain mpi4py's on host copies (integers:
exactly). Then hundreds of calls alternating placements (the board's ring wraps around), and a rank
that refuses its arguments (its device peers raise, naming it).

Runs on CPUs with the fake CUDA layer (MIXED_ENGINE=1: the fake engine of fake_engine.py, where device
ranks meet in shared memory and never in MPI, as on GPUs; else the staged path) and on GPUs with
MPIGPU_CHECK_ON_GPU=1 (CuPy), under mpiexec -n 1..4, MPIGPU_SIMULATE_NODES included; MIXED_NO_BOARD=1:
one node whose ranks cannot share the board's file (they agree through MPI instead).
"""
import os
import sys

import numpy as np
from mpi4py import MPI

from fake_device import install_unless_gpu

cp = install_unless_gpu()
if cp is None and os.environ.get('MIXED_ENGINE') == '1':
    from fake_engine import install_engine
    FakeCAI = install_engine()
elif cp is None:
    from fake_device import FakeCAI

import mpigpu  # noqa: E402
from mpigpu._ext._intake import is_device  # noqa: E402

if os.environ.get('MIXED_NO_BOARD') == '1':  # no file the node's ranks can share: they agree through MPI
    from mpigpu._state import agree as _agree
    _agree._board_dir = lambda: '/proc/mpigpu-no-such-dir'

world_plain = MPI.COMM_WORLD
rank, n = world_plain.Get_rank(), world_plain.Get_size()
checks = 0
QUICK = '--quick' in sys.argv


class Buf:
    """A buffer on the device or the host, holding `arr`'s values; `obj` is what the call takes."""
    Device = cp.ndarray if cp is not None else FakeCAI

    def __init__(self, arr, device):
        self.device = device
        if not device:
            self.host = arr.copy()
            self.obj = self.host
        elif cp is not None:
            self.dev = cp.asarray(arr)
            self.obj = self.dev
        else:
            self.host = arr.copy()
            self.obj = FakeCAI(self.host)

    def values(self):
        if self.device and cp is not None:
            return cp.asnumpy(self.dev)
        return self.host


def stream_of():
    if cp is not None:
        return cp.cuda.Stream()  # ordered after the legacy default stream, where the arrays were made
    return 12345  # the fake layer's streams are numbers


def sync(stream):
    if cp is not None:
        stream.synchronize()
    else:
        mpigpu._cuda.device.stream_sync(stream)


PLACEMENTS = {
    'all-device': lambda r, root: (True, True),
    'all-host': lambda r, root: (False, False),
    'root-only': lambda r, root: (r == root, r == root),
    'non-roots': lambda r, root: (r != root, r != root),
    'alternate': lambda r, root: (r % 2 == 0, r % 2 == 0),
    'odd': lambda r, root: (r % 2 == 1, r % 2 == 1),
    'send-on-device': lambda r, root: (True, r != n - 1),   # the last rank: send device, receive host
    'recv-on-device': lambda r, root: (r != n - 1, True),   # the last rank: send host, receive device
}
ROUNDS = 2  # of a persistent request (in place, the second reads the first's output: idempotent ops)


def _host_persistent():
    """True when host MPI has persistent collectives (MPI 4: MPICH; not Open MPI 4.1, the GPU host's)."""
    try:
        world_plain.Allreduce_init(np.zeros(1), np.zeros(1)).Free()
        return True
    except (NotImplementedError, MPI.Exception):
        return False


FORMS = ('blocking', 'nonblocking') + (('persistent',) if _host_persistent() else ()) + ('stream',)
if QUICK:
    FORMS = FORMS[:2]


def data(count, salt, dt=np.int64):
    rng = np.random.default_rng(1000 * salt + rank)
    return rng.integers(-50, 50, count).astype(dt)


def run_form(comm, form, method, args, on_device, rounds=None):
    """Calls comm.<method>(*args) in `form`; stream= only where this rank's buffers are on the device
    (a host rank makes the blocking call)."""
    bufs = [a for a in args if isinstance(a, (Buf.Device, np.ndarray)) or hasattr(a, '__cuda_array_interface__')]
    on_device = on_device and all(is_device(a) for a in bufs)  # (an empty fake array is host memory)
    if form == 'blocking' or (form == 'stream' and not on_device):
        getattr(comm, method)(*args)
    elif form == 'nonblocking':
        getattr(comm, 'I' + method[0].lower() + method[1:])(*args).Wait()
    elif form == 'persistent':
        req = getattr(comm, method + '_init')(*args)
        for _ in range(ROUNDS if rounds is None else rounds):
            req.Start()
            req.Wait()
        req.Free()
    else:
        s = stream_of()
        getattr(comm, method)(*args, stream=s)
        sync(s)


def same(got, expect, label):
    global checks
    assert got.shape == expect.shape and (got == expect).all(), \
        f'rank {rank}: {label}: {got[:8]} != mpi4py {expect[:8]}'
    checks += 1


def out_of_place(comm, plain, form, method, x, nrecv, args, s_dev, r_dev, label):
    """comm.<method>(send, recv, *args) with send holding x and recv nrecv elements, against mpi4py's."""
    send, recv = Buf(x, s_dev), Buf(np.full(nrecv, -7, np.int64), r_dev)
    run_form(comm, form, method, (send.obj, recv.obj, *args), s_dev and r_dev)
    expect = np.zeros(nrecv, np.int64)
    getattr(plain, method)(x, expect, *args)
    same(recv.values(), expect, f'{method} {label}')


def matrix(comm, plain, tag):
    """Every collective x placement x form on `comm` (mpigpu's) against `plain` (mpi4py's, same group)."""
    me, size = comm.Get_rank(), comm.Get_size()
    root = size - 1 if size > 1 else 0
    counts = (0, 1, 2 * size + 3) if not QUICK else (0, 2 * size + 3)
    for pname, where in PLACEMENTS.items():
        s_dev, r_dev = where(me, root)
        for form in FORMS:
            for count in counts:
                label = f'{tag} {pname} {form} count {count}'
                # Allreduce, out of place and in place
                x = data(count, 1)
                out_of_place(comm, plain, form, 'Allreduce', x, count, (MPI.SUM,), s_dev, r_dev, label)
                expect = np.zeros(count, np.int64)
                inplace = Buf(x, r_dev)
                run_form(comm, form, 'Allreduce', (MPI.IN_PLACE, inplace.obj, MPI.MAX), r_dev)
                plain.Allreduce(x, expect, MPI.MAX)
                same(inplace.values(), expect, 'Allreduce in place ' + label)
                # Bcast from the root
                b = Buf(data(count, 2) if me == root else np.full(count, -7, np.int64), r_dev)
                run_form(comm, form, 'Bcast', (b.obj, root), r_dev)
                expect = data(count, 2) if me == root else np.full(count, -7, np.int64)
                plain.Bcast(expect, root)
                same(b.values(), expect, 'Bcast ' + label)
                # Reduce to the root (recvbuf None off it), and in place at it
                send = Buf(x, s_dev)
                recv = Buf(np.full(count, -7, np.int64), r_dev) if me == root else None
                run_form(comm, form, 'Reduce', (send.obj, recv.obj if recv else None, MPI.SUM, root), s_dev)
                expect = np.full(count, -7, np.int64)
                plain.Reduce(x, expect if me == root else None, MPI.SUM, root)
                if me == root:
                    same(recv.values(), expect, 'Reduce ' + label)
                if me == root:
                    inplace = Buf(x, r_dev)
                    run_form(comm, form, 'Reduce', (MPI.IN_PLACE, inplace.obj, MPI.MIN, root), r_dev)
                    plain.Reduce(MPI.IN_PLACE, expect_in := x.copy(), MPI.MIN, root)
                    same(inplace.values(), expect_in, 'Reduce in place ' + label)
                else:
                    send = Buf(x, s_dev)
                    run_form(comm, form, 'Reduce', (send.obj, None, MPI.MIN, root), s_dev)
                    plain.Reduce(x, None, MPI.MIN, root)
                # Reduce_scatter_block, out of place and in place
                xs = data(count * size, 3)
                out_of_place(comm, plain, form, 'Reduce_scatter_block', xs, count, (MPI.SUM,), s_dev, r_dev, label)
                inplace = Buf(xs, r_dev)
                # one round: what the second reads beyond block 0 MPI leaves to the implementation
                run_form(comm, form, 'Reduce_scatter_block', (MPI.IN_PLACE, inplace.obj, MPI.SUM), r_dev, 1)
                expect_in = xs.copy()
                plain.Reduce_scatter_block(MPI.IN_PLACE, expect_in, MPI.SUM)
                same(inplace.values()[:count], expect_in[:count], 'Reduce_scatter_block in place ' + label)
                # Allgather, out of place and in place
                out_of_place(comm, plain, form, 'Allgather', x, count * size, (), s_dev, r_dev, label)
                full = np.full(count * size, -7, np.int64)
                full[me * count:(me + 1) * count] = x
                inplace = Buf(full, r_dev)
                run_form(comm, form, 'Allgather', (MPI.IN_PLACE, inplace.obj), r_dev)
                expect_in = full.copy()
                plain.Allgather(MPI.IN_PLACE, expect_in)
                same(inplace.values(), expect_in, 'Allgather in place ' + label)


def many_calls(comm, plain, calls):
    """`calls` small Allreduces, the placement changing from call to call (the board's ring wraps)."""
    me = comm.Get_rank()
    for k in range(calls):
        dev = (k + me) % 3 != 0
        x = data(3, k)
        y = Buf(np.zeros(3, np.int64), dev)
        comm.Allreduce(Buf(x, dev).obj, y.obj, MPI.SUM)
        expect = np.zeros(3, np.int64)
        plain.Allreduce(x, expect, MPI.SUM)
        same(y.values(), expect, f'call {k} of {calls}')


def refusal(comm):
    """A device rank that refuses its own arguments (a read-only receive buffer): its device peers
    raise too, naming it, instead of waiting for it; the communicator goes on."""
    global checks
    if comm.Get_size() < 2:
        return
    me = comm.Get_rank()
    x = Buf(data(4, 9), True)
    y = Buf(np.zeros(4, np.int64), True)
    bad = y.obj if me != 1 else _ReadOnly(y.obj.__cuda_array_interface__)
    try:
        comm.Allreduce(x.obj, bad, MPI.SUM)
        raise AssertionError(f'rank {me}: Allreduce with a refused receive buffer on rank 1 did not raise')
    except mpigpu.Error as exc:
        named = 'rank 1 refused' if comm.agreement_status().startswith('the node') else 'refused'
        assert me == 1 and 'not writable' in str(exc) or me != 1 and named in str(exc), str(exc)
    checks += 1
    y2 = Buf(np.zeros(4, np.int64), True)
    comm.Allreduce(x.obj, y2.obj, MPI.SUM)  # the communicator still works
    expect = np.zeros(4, np.int64)
    comm.Allreduce(data(4, 9), expect, MPI.SUM)
    same(y2.values(), expect, 'after a refusal')


class _ReadOnly:
    """The same device memory, exported read-only."""

    def __init__(self, cai):
        self.__cuda_array_interface__ = dict(cai, data=(cai['data'][0], True))


def first_call_nonblocking(world):
    """A communicator whose first engine collective is non-blocking: the setup starts without waiting
    and that call is the host MPI call on every rank; the next call finishes the setup."""
    me = world.Get_rank()
    for pname in ('all-device', 'alternate'):
        comm = world.Dup()
        dev = PLACEMENTS[pname](me, 0)[0]
        for k in range(3):
            x = data(5, 40 + k)
            y = Buf(np.zeros(5, np.int64), dev)
            if k == 0:
                comm.Iallreduce(Buf(x, dev).obj, y.obj, MPI.SUM).Wait()
            else:
                comm.Allreduce(Buf(x, dev).obj, y.obj, MPI.SUM)
            expect = np.zeros(5, np.int64)
            world_plain.Allreduce(x, expect, MPI.SUM)
            same(y.values(), expect, f'first call non-blocking, {pname}, call {k}')
        comm.Free()


world = mpigpu.COMM_WORLD
first_call_nonblocking(world)
matrix(world, world_plain, 'world')
if n >= 2 and not QUICK:
    color = rank % 2
    sub, sub_plain = world.Split(color, rank), world_plain.Split(color, rank)
    matrix(sub, sub_plain, f'split {color}')
    sub.Free()
    sub_plain.Free()
    cart = world.Create_cart([n], periods=[True])
    matrix(cart, world_plain, 'cart')
    cart.Free()
many_calls(world, world_plain, 300 if QUICK else 700)
refusal(world)
world_plain.Barrier()
status = world.agreement_status()
if rank == 0:
    print(f'mixed placement on {n} ranks ({status}): {checks} checks identical to mpi4py')
