"""Device buffers on the general path when host MPI is taken for CUDA-aware (MPIGPU_MPI_CUDA_AWARE=1): the
call goes to mpi4py with the arguments the general path read once (DeviceBuffers, read_once), which
mpi4py must read as CUDA arrays. On the fake CUDA layer "device memory" is host memory, so MPICH can
move it. The engine collectives (Plan), the exchange family and rooted calls with buffers that do not
matter on a rank."""
import numpy as np
from fake_device import FakeCAI, install

install()
from mpigpu import MPI  # noqa: E402

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
s, r = FakeCAI(np.arange(8, dtype=np.float64)), FakeCAI(np.zeros(8))
comm.Allreduce(s, r)
assert (r.a == np.arange(8) * n).all(), r.a
comm.Allreduce([s, MPI.DOUBLE], [r, 8, MPI.DOUBLE], MPI.MAX)
assert (r.a == np.arange(8)).all(), r.a
b = FakeCAI(np.arange(4, dtype=np.int32) if rank == n - 1 else np.zeros(4, np.int32))
comm.Bcast(b, n - 1)
assert (b.a == np.arange(4)).all(), b.a
xs, xr = FakeCAI(np.repeat(np.arange(n, dtype=np.float64) + 10 * rank, 2)), FakeCAI(np.zeros(2 * n))
comm.Alltoall(xs, xr)
assert (xr.a == np.repeat(np.arange(n) * 10.0 + rank, 2)).all(), xr.a
g = FakeCAI(np.zeros(2 * n))  # a receive buffer that matters at the root only
comm.Gather(FakeCAI(np.full(2, rank, np.float64)), g, root=0)
assert rank != 0 or (g.a == np.repeat(np.arange(n, dtype=np.float64), 2)).all(), g.a
comm.Iallreduce(s, r).Wait()
assert (r.a == np.arange(8) * n).all(), r.a
x, y = FakeCAI(np.full(3, rank + 0.5)), FakeCAI(np.zeros(3))
comm.Sendrecv(x, (rank + 1) % n, 2, y, (rank - 1) % n, 2)
assert (y.a == (rank - 1) % n + 0.5).all(), y.a
comm.Barrier()
if rank == 0:
    print(f'CUDA-aware host MPI on the general path, {n} ranks: ok')
