"""The rest of the buffer API with device buffers (host mirrors, mpigpu/_paths/mirrored.py), checked bit for
bit against plain mpi4py on NumPy buffers: point-to-point, Gather(v), Scatter(v), Allgatherv,
Alltoall(v), Reduce_scatter, Scan, Exscan, in place where MPI allows. A fake CUDA layer lets it run on
CPUs. Run under mpiexec -n 1..4 (tests/test_mpi.py)."""
import threading
import time

import numpy as np
from mpi4py import MPI

from fake_device import FakeCAI, install

install()
import mpigpu  # noqa: E402

world = mpigpu.COMM_WORLD
plain = MPI.COMM_WORLD
rank, n = world.Get_rank(), world.Get_size()
checks = 0


def same(dev_arr, host_arr, what):
    global checks
    checks += 1
    assert dev_arr.tobytes() == host_arr.tobytes(), f'rank {rank}: {what}: mirrored and mpi4py results differ'


def data(count, dt=np.float64, salt=0):
    return (np.arange(count, dtype=np.float64) * (rank + 1) + salt).astype(dt)


# point to point: ring Sendrecv, Send/Recv pairs, Sendrecv_replace, Probe then Recv
nxt, prv = (rank + 1) % n, (rank - 1) % n
a, b = data(1001), np.full(1001, -1.0)
world.Sendrecv(FakeCAI(a), nxt, 7, FakeCAI(b), prv, 7)
same(b, data(1001) * 0 + np.arange(1001) * (prv + 1), 'Sendrecv ring')
if n > 1:
    if rank == 0:
        world.Send([FakeCAI(data(64, np.int32)), 32, MPI.INT], 1, tag=3)
        world.Ssend(FakeCAI(data(8, np.float32)), 1, tag=4)
    elif rank == 1:
        st = MPI.Status()
        world.Probe(0, 3, st)
        got = np.zeros(st.Get_count(MPI.INT) + 4, np.int32)
        world.Recv([FakeCAI(got), st.Get_count(MPI.INT), MPI.INT], 0, 3)
        same(got[:32], np.arange(32, dtype=np.int32), 'Probe then Recv')
        assert (got[32:] == 0).all(), 'Recv wrote past its count'
        got = np.zeros(8, np.float32)
        world.Recv(FakeCAI(got), 0, 4)
        same(got, np.arange(8, dtype=np.float32), 'Ssend/Recv')
c = data(50)
world.Sendrecv_replace(FakeCAI(c), nxt, 1, prv, 1)
same(c, np.arange(50, dtype=np.float64) * (prv + 1), 'Sendrecv_replace')
# Sendrecv_replace through a datatype with gaps, and a persistent receive over rounds: both post the
# receive as Irecv does (mpigpu/_paths/p2p.py), so a GPU sender's header is taken, not landed as data
vec = MPI.DOUBLE.Create_vector(4, 1, 3).Commit()
c1, c2 = data(13, salt=3), data(13, salt=3)
st1, st2 = MPI.Status(), MPI.Status()
world.Sendrecv_replace([FakeCAI(c1), 1, vec], nxt, 2, prv, 2, st1)
plain.Sendrecv_replace([c2, 1, vec], nxt, 2, prv, 2, st2)
same(c1, c2, 'Sendrecv_replace of a vector')
assert (st1.Get_source(), st1.Get_tag(), st1.Get_count(MPI.DOUBLE)) == (
    st2.Get_source(), st2.Get_tag(), st2.Get_count(MPI.DOUBLE)), 'Sendrecv_replace status'
vec.Free()
r1, r2 = np.full(20, -1.0), np.full(20, -1.0)
q1, q2 = world.Recv_init(FakeCAI(r1), prv, 5), plain.Recv_init(r2, prv, 6)
for turn in range(3):
    q1.Start()
    q2.Start()
    world.Send(FakeCAI(data(20 - turn, salt=turn)), nxt, 5)
    plain.Send(data(20 - turn, salt=turn), nxt, 6)
    q1.Wait(st1)
    q2.Wait(st2)
    same(r1, r2, f'Recv_init round {turn}')
    assert (st1.Get_source(), st1.Get_count(MPI.DOUBLE)) == (st2.Get_source(), st2.Get_count(MPI.DOUBLE)), \
        f'Recv_init round {turn} status'
    assert q1, 'an inactive persistent request stays true until freed'
    assert not st1.Is_cancelled(), f'Recv_init round {turn} reported cancelled'
q1.Start()  # a round no send meets, cancelled: Wait completes it, its status cancelled
q1.Cancel()
q1.Wait(st1)
assert st1.Is_cancelled(), 'a cancelled Recv_init round is not reported cancelled'
q1.Start()  # the same from another thread while this one waits (the wait polls: the cancel gets in)
waiter = threading.Thread(target=q1.Wait, args=(st2,), daemon=True)
waiter.start()
time.sleep(0.05)
q1.Cancel()
waiter.join(30)
assert not waiter.is_alive() and st2.Is_cancelled(), 'a Recv_init round waited for on another thread was not cancelled'
q1.Free()
q2.Free()
assert not q1, 'a freed persistent request is false'

# rooted collectives, every root, out of place and in place
counts = [i + 1 for i in range(n)]
displs = [sum(counts[:i]) + i for i in range(n)]  # gaps between blocks
total = displs[-1] + counts[-1] + 2
for root in range(n):
    x = data(3)
    r1, r2 = np.full(3 * n, -1.0), np.full(3 * n, -1.0)
    world.Gather(FakeCAI(x), FakeCAI(r1) if rank == root else None, root)
    plain.Gather(x, r2 if rank == root else None, root)
    same(r1, r2, f'Gather root {root}')
    x = data(counts[rank], salt=1)
    r1, r2 = np.full(total, -1.0), np.full(total, -1.0)
    world.Gatherv(FakeCAI(x), [FakeCAI(r1), counts, displs, MPI.DOUBLE] if rank == root else None, root)
    plain.Gatherv(x, [r2, counts, displs, MPI.DOUBLE] if rank == root else None, root)
    same(r1, r2, f'Gatherv root {root}')
    s = np.arange(3 * n, dtype=np.float64) + 10 * root
    r1, r2 = np.full(3, -1.0), np.full(3, -1.0)
    world.Scatter(FakeCAI(s) if rank == root else None, FakeCAI(r1), root)
    plain.Scatter(s if rank == root else None, r2, root)
    same(r1, r2, f'Scatter root {root}')
    s = np.arange(total, dtype=np.float64)
    r1, r2 = np.full(counts[rank], -1.0), np.full(counts[rank], -1.0)
    world.Scatterv([FakeCAI(s), counts, displs, MPI.DOUBLE] if rank == root else None, FakeCAI(r1), root)
    plain.Scatterv([s, counts, displs, MPI.DOUBLE] if rank == root else None, r2, root)
    same(r1, r2, f'Scatterv root {root}')
    # in place at the root
    r1 = np.full(3 * n, -1.0)
    r1[root * 3:root * 3 + 3] = data(3)
    r2 = r1.copy()
    if rank == root:
        world.Gather(MPI.IN_PLACE, FakeCAI(r1), root)
        plain.Gather(MPI.IN_PLACE, r2, root)
    else:
        world.Gather(FakeCAI(data(3)), None, root)
        plain.Gather(data(3), None, root)
    same(r1, r2, f'Gather in place root {root}')

# all-to-all family and reductions
x = data(counts[rank], salt=2)
r1, r2 = np.full(total, -1.0), np.full(total, -1.0)
world.Allgatherv(FakeCAI(x), [FakeCAI(r1), counts, displs, MPI.DOUBLE])
plain.Allgatherv(x, [r2, counts, displs, MPI.DOUBLE])
same(r1, r2, 'Allgatherv')
x = data(2 * n, np.int64)
r1, r2 = np.zeros(2 * n, np.int64), np.zeros(2 * n, np.int64)
world.Alltoall(FakeCAI(x), FakeCAI(r1))
plain.Alltoall(x, r2)
same(r1, r2, 'Alltoall')
r1 = x.copy()
r2 = x.copy()
world.Alltoall(MPI.IN_PLACE, FakeCAI(r1))
plain.Alltoall(MPI.IN_PLACE, r2)
same(r1, r2, 'Alltoall in place')
sc = [(rank + j) % 3 + 1 for j in range(n)]
sd = [sum(sc[:j]) for j in range(n)]
rc = [(j + rank) % 3 + 1 for j in range(n)]
rd = [sum(rc[:j]) for j in range(n)]
x = data(sum(sc), np.float32)
r1, r2 = np.zeros(sum(rc), np.float32), np.zeros(sum(rc), np.float32)
world.Alltoallv([FakeCAI(x), sc, sd, MPI.FLOAT], [FakeCAI(r1), rc, rd, MPI.FLOAT])
plain.Alltoallv([x, sc, sd, MPI.FLOAT], [r2, rc, rd, MPI.FLOAT])
same(r1, r2, 'Alltoallv')
x = data(sum(counts), np.int32)
r1, r2 = np.zeros(counts[rank], np.int32), np.zeros(counts[rank], np.int32)
world.Reduce_scatter(FakeCAI(x), FakeCAI(r1), counts, MPI.SUM)
plain.Reduce_scatter(x, r2, counts, MPI.SUM)
same(r1, r2, 'Reduce_scatter')
for op in (MPI.SUM, MPI.MAX, MPI.PROD):
    x = data(17, np.int64, salt=1)
    r1, r2 = np.full(17, -5, np.int64), np.full(17, -5, np.int64)
    world.Scan(FakeCAI(x), FakeCAI(r1), op)
    plain.Scan(x, r2, op)
    same(r1, r2, f'Scan {op}')
    r1, r2 = np.full(17, -5, np.int64), np.full(17, -5, np.int64)
    world.Exscan(FakeCAI(x), FakeCAI(r1), op)
    plain.Exscan(x, r2, op)
    if rank > 0:
        same(r1, r2, f'Exscan {op}')
    else:
        assert (r1 == -5).all(), 'Exscan changed rank 0 recvbuf, which MPI leaves undefined and mpigpu untouched'
r1 = data(17, np.int64, salt=1)
r2 = r1.copy()
world.Scan(MPI.IN_PLACE, FakeCAI(r1))
plain.Scan(MPI.IN_PLACE, r2)
same(r1, r2, 'Scan in place')
# float16: what host MPI does with host float16 arrays (MPICH reduces them; without a float16 type, an error)
r1, r2 = np.zeros(4, np.float16), np.zeros(4, np.float16)
try:
    plain.Scan(data(4, np.float16), r2)
    host_ok = True
except Exception:
    host_ok = False
try:
    world.Scan(FakeCAI(data(4, np.float16)), FakeCAI(r1))
    assert host_ok, 'Scan on float16 ran where host MPI has no float16 type'
    same(r1, r2, 'Scan float16')
except mpigpu.Error as e:
    assert not host_ok and 'cannot reduce float16' in str(e) and f'rank {rank}' in str(e), str(e)
try:
    world.Scan(FakeCAI(np.zeros(4, np.uint16)), FakeCAI(np.zeros(4, np.uint16)), MPI.SUM)
except mpigpu.Error:
    raise AssertionError('Scan of uint16 raised')
world.Barrier()
if rank == 0:
    print(f'mirrored buffer API on {n} ranks: {checks} checks identical to mpi4py')
