"""Non-blocking and persistent calls with device buffers (mpigpu/_state/requests.py, mpigpu/_paths/p2p.py) on the
staged path, checked against plain mpi4py on NumPy buffers: Isend/Irecv rings completed by the
class-level Waitall (the agent thread completes the generalized requests), statuses, Probe then
Irecv, Testall loops, the five non-blocking collectives, persistent collectives started several
times with new data, and the mirrored non-blocking collectives. A fake CUDA layer lets it run on CPUs.
Run under mpiexec -n 1..4 (tests/test_mpi.py)."""
import numpy as np
from mpi4py import MPI

from fake_device import FakeCAI, install

install()
import mpigpu  # noqa: E402

mpigpu.config.algo = "staged"  # no device team under the fake layer

world = mpigpu.COMM_WORLD
plain = MPI.COMM_WORLD
rank, n = world.Get_rank(), world.Get_size()
checks = 0


def same(got, want, what):
    global checks
    checks += 1
    assert got.tobytes() == want.tobytes(), f'rank {rank}: {what}: {got[:8]} != {want[:8]}'


def data(count, dt=np.float64, salt=0):
    return (np.arange(count, dtype=np.float64) * (rank + 1) + salt).astype(dt)


nxt, prv = (rank + 1) % n, (rank - 1) % n

# ring of Isend/Irecv in both directions, completed by mpi4py's class-level Waitall
for count in (0, 1, 1000, 70000):
    a, b = data(count), data(count, salt=5)
    ra, rb = np.full(count, -1.0), np.full(count, -1.0)
    reqs = [world.Irecv(FakeCAI(ra), prv, 11), world.Irecv(FakeCAI(rb), nxt, 12),
            world.Isend(FakeCAI(a), nxt, 11), world.Isend(FakeCAI(b), prv, 12)]
    a[:] = -7  # the send buffer was snapshot: MPI lets the sender reuse it only after completion,
    # but mpigpu's copy is taken at the call, so this must not change what arrives
    MPI.Request.Waitall(reqs)
    same(ra, np.arange(count, dtype=np.float64) * (prv + 1), f'Isend/Irecv ring {count}')
    same(rb, np.arange(count, dtype=np.float64) * (nxt + 1) + 5, f'Isend/Irecv reverse ring {count}')

# statuses and Probe then Irecv with a buffer specification; Testall polling; Issend
if n > 1:
    if rank == 0:
        r = world.Issend([FakeCAI(data(64, np.int32)), 40, MPI.INT], 1, tag=3)
        r2 = world.Isend(FakeCAI(data(5, np.float32)), 1, tag=4)
        while not MPI.Request.Testall([r, r2]):
            pass
    elif rank == 1:
        st = MPI.Status()
        world.Probe(0, 3, st)
        got = np.zeros(st.Get_count(MPI.INT) + 4, np.int32)
        req = world.Irecv([FakeCAI(got), st.Get_count(MPI.INT), MPI.INT], 0, 3)
        st2 = MPI.Status()
        req.Wait(st2)
        assert (st2.Get_source(), st2.Get_tag(), st2.Get_count(MPI.INT)) == (0, 3, 40), \
            (st2.Get_source(), st2.Get_tag(), st2.Get_count(MPI.INT))
        same(got[:40], np.arange(40, dtype=np.int32), 'Probe then Irecv')
        assert (got[40:] == 0).all(), 'Irecv wrote past its count'
        got = np.zeros(8, np.float32)
        req = world.Irecv(FakeCAI(got), MPI.ANY_SOURCE, MPI.ANY_TAG)
        st3 = MPI.Status()
        while not req.Test(st3):
            pass
        assert (st3.Get_source(), st3.Get_tag(), st3.Get_count(MPI.FLOAT)) == (0, 4, 5)
        same(got, np.r_[np.arange(5, dtype=np.float32), np.zeros(3, np.float32)], 'Irecv ANY_SOURCE')

# non-blocking collectives (the staged path completes them at the call)
x = data(1001)
r1, r2 = np.full(1001, -1.0), np.full(1001, -1.0)
req = world.Iallreduce(FakeCAI(x), FakeCAI(r1), MPI.SUM)
MPI.Request.Waitall([req])
plain.Allreduce(x, r2, MPI.SUM)
same(r1, r2, 'Iallreduce')
for root in range(n):
    b1 = data(33) if rank == root else np.zeros(33)
    world.Ibcast(FakeCAI(b1), root).Wait()
    same(b1, np.arange(33, dtype=np.float64) * (root + 1), f'Ibcast root {root}')
x = data(4 * n, np.int32)
r1, r2 = np.zeros(4, np.int32), np.zeros(4, np.int32)
world.Ireduce_scatter_block(FakeCAI(x), FakeCAI(r1), MPI.MAX).Wait()
plain.Reduce_scatter_block(x, r2, MPI.MAX)
same(r1, r2, 'Ireduce_scatter_block')
r1, r2 = np.zeros(3 * n), np.zeros(3 * n)
world.Iallgather(FakeCAI(data(3)), FakeCAI(r1)).Wait()
plain.Allgather(data(3), r2)
same(r1, r2, 'Iallgather')
r1, r2 = np.zeros(7), np.zeros(7)
world.Ireduce(FakeCAI(data(7)), FakeCAI(r1) if rank == n - 1 else None, MPI.SUM, n - 1).Wait()
plain.Reduce(data(7), r2 if rank == n - 1 else None, MPI.SUM, n - 1)
same(r1, r2, 'Ireduce')
r1, r2 = np.zeros(5), np.zeros(5)
world.Iscan(FakeCAI(data(5)), FakeCAI(r1), MPI.SUM).Wait()
plain.Scan(data(5), r2, MPI.SUM)
same(r1, r2, 'Iscan (blocking form)')

# Isendrecv / Isendrecv_replace on host mirrors: results, and the receive's status as plain mpi4py's
r1 = np.full(9, -1.0)
req = world.Isendrecv(FakeCAI(data(9)), nxt, 21, FakeCAI(r1), prv, 21)
st = MPI.Status()
req.Wait(st)
same(r1, np.arange(9, dtype=np.float64) * (prv + 1), 'Isendrecv')
r2, st2 = np.full(9, -1.0), MPI.Status()
plain.Isendrecv(data(9), nxt, 21, r2, prv, 21).Wait(st2)  # the status is the MPI library's, as with NumPy
assert (st.Get_source(), st.Get_tag(), st.Get_count(MPI.DOUBLE)) == \
    (st2.Get_source(), st2.Get_tag(), st2.Get_count(MPI.DOUBLE)), 'Isendrecv status'
r1 = data(6)
world.Isendrecv_replace(FakeCAI(r1), nxt, 22, prv, 22).Wait()
same(r1, np.arange(6, dtype=np.float64) * (prv + 1), 'Isendrecv_replace')

# persistent collectives: planned once, started with new data each time
x, y = np.zeros(300), np.full(300, -1.0)
p = world.Allreduce_init(FakeCAI(x), FakeCAI(y), MPI.SUM)
for it in range(3):
    x[:] = data(300, salt=it)
    p.Start()
    p.Wait()
    want = np.zeros(300)
    plain.Allreduce(x, want, MPI.SUM)
    same(y, want, f'Allreduce_init round {it}')
b = np.zeros(10)
q = world.Bcast_init(FakeCAI(b), root=0)
for it in range(2):
    if rank == 0:
        b[:] = np.arange(10) + it
    mpigpu.Startall([q])
    MPI.Request.Waitall([q])
    same(b, np.arange(10, dtype=np.float64) + it, f'Bcast_init round {it}')
p.Free()
q.Free()

world.Barrier()
print(f'rank {rank}: {checks} non-blocking checks identical to mpi4py', flush=True)
