"""How many times a call asks a buffer's exporter for its memory (issue 45: each buffer read once, as
mpi4py's intake reads it): a CUDA Array Interface exporter that counts the reads of its
__cuda_array_interface__ (a generic exporter: CuPy's and PyTorch's arrays are told by their type, and
no read is saved there), on the fake CUDA layer, whose ranks form no device team, so each call goes
down the general path after the fast path declines. The method's placement check reads the first
device buffer it meets, the general path each buffer once for all its steps (placement, the intake,
the exchange's ranges, host mirrors), taking what the check read (`_recalled` in _intake.pyx): one read
per buffer. Failing counts are the first line of the output."""
import numpy as np
from fake_device import device_memory, install

install()
from mpigpu import MPI  # noqa: E402

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
nxt, prv = (rank + 1) % n, (rank - 1) % n


class Counting:
    """A device array (fake) exported through the CUDA Array Interface, counting the exporter's reads."""

    def __init__(self, a):
        self.a, self.reads = a, 0
        self._cai = {'shape': a.shape, 'typestr': a.dtype.str, 'data': (a.ctypes.data, False), 'version': 3,
                     'strides': None, 'stream': 1}
        device_memory(self, a.ctypes.data, a.nbytes)

    @property
    def __cuda_array_interface__(self):
        self.reads += 1
        return self._cai


def reads(fn, *bufs):
    for b in bufs:
        b.reads = 0
    fn()
    return [b.reads for b in bufs]


def persistent(s, r):
    req = comm.Allreduce_init(s, r)
    req.Start()
    req.Wait()
    req.Free()


s, r = Counting(np.arange(8, dtype=np.float64)), Counting(np.zeros(8))
v = [2] * n, list(range(0, 2 * n, 2))
xs, xr = Counting(np.arange(2 * n, dtype=np.float64)), Counting(np.zeros(2 * n))
b = Counting(np.arange(8, dtype=np.float64))
# (call, reads of each buffer: one)
want = {
    'Allreduce': (lambda: comm.Allreduce(s, r), (s, r), [1, 1]),
    'Allreduce [buffer, type]': (lambda: comm.Allreduce([s, MPI.DOUBLE], [r, MPI.DOUBLE]), (s, r), [1, 1]),
    'Iallreduce': (lambda: comm.Iallreduce(s, r).Wait(), (s, r), [1, 1]),
    'Allreduce_init': (lambda: persistent(s, r), (s, r), [1, 1]),
    'Bcast': (lambda: comm.Bcast(b, 0), (b,), [1]),
    'Alltoall': (lambda: comm.Alltoall(xs, xr), (xs, xr), [1, 1]),
    'Alltoallv': (lambda: comm.Alltoallv([xs, *v, MPI.DOUBLE], [xr, *v, MPI.DOUBLE]), (xs, xr), [1, 1]),
    'Allgather': (lambda: comm.Allgather(Counting(np.full(2, rank, np.float64)), xr), (xr,), [1]),
    'Sendrecv': (lambda: comm.Sendrecv(s, nxt, 5, r, prv, 5), (s, r), [1, 1]),
    'Isend, Irecv': (lambda: MPI.Request.Waitall([comm.Irecv(r, prv, 7), comm.Isend(b, nxt, 7)]), (b, r), [1, 1]),
}
if n > 1:  # (a blocking Send to itself need not return before its Recv: MPI does not buffer it)
    want['Send, Recv'] = (lambda: (comm.Send(b, nxt, 6), comm.Recv(r, prv, 6)) if rank % 2 == 0 else
                          (comm.Recv(r, prv, 6), comm.Send(b, nxt, 6)), (b, r), [1, 1])
bad = []
for name, (fn, bufs, expect) in want.items():
    got = reads(fn, *bufs)
    if got != expect:
        bad.append(f'{name}: {got} reads, not {expect}')
assert (r.a == np.arange(8)).all() and (xr.a == np.repeat(np.arange(n, dtype=np.float64), 2)).all()
bad = comm.allgather(bad)
if rank == 0:
    print('; '.join(sum(bad, [])) or f'buffer reads on {n} ranks: {len(want)} calls as counted')
