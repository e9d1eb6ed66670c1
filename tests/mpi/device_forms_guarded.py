"""Device memory given as code written for a CUDA-aware MPI gives it (issue 35): raw addresses wrapped
as MPI.memory / MPI.buffer, in every buffer specification form and with strided (vector, resized)
datatypes, through mpigpu with the fake CUDA layer. Run under the device-pointer guard in report
mode (tests/test_device_guard.py): the guard lists every call that let such a pointer reach MPI. A
call may instead refuse with mpigpu.Error (issue 35 allows it); a call that completes must give
NumPy's result. Prints one line per call."""
import ctypes

import numpy as np
from mpi4py import MPI

import fake_device

fake_device.install()
import mpigpu  # noqa: E402

comm = mpigpu.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
nxt, prv = (rank + 1) % n, (rank - 1) % n
COUNT = 5
kept = []


def device(values, wrap=MPI.memory):
    """A float64 array registered as device memory, and `wrap.fromaddress` over it."""
    a = np.array(values, np.float64)
    kept.append(a)
    fake_device.register_device(a.ctypes.data, a.nbytes)
    return a, wrap.fromaddress(a.ctypes.data, a.nbytes)


def mine(k=0):
    return np.arange(COUNT, dtype=np.float64) + 10 * rank + k


counts = [COUNT] * n
displs = [COUNT * r for r in range(n)]
gathered = np.concatenate([np.arange(COUNT, dtype=np.float64) + 10 * r for r in range(n)])
total = sum(np.arange(COUNT, dtype=np.float64) + 10 * r for r in range(n))
D = MPI.DOUBLE


def allreduce_typed(wrap):
    (_, ms), (r, mr) = device(mine(), wrap), device(np.zeros(COUNT), wrap)
    comm.Allreduce([ms, D], [mr, D])
    return r, total


def allreduce_counted(wrap):
    (_, ms), (r, mr) = device(mine(), wrap), device(np.zeros(COUNT), wrap)
    comm.Allreduce([ms, COUNT, D], [mr, COUNT, D])
    return r, total


def allreduce_in_place(wrap):
    r, mr = device(mine(), wrap)
    comm.Allreduce(MPI.IN_PLACE, [mr, D])
    return r, total


def bcast_bytes(wrap):
    r, mr = device(mine() if rank == 0 else np.zeros(COUNT), wrap)
    comm.Bcast(mr, root=0)  # no datatype: bytes
    return r, np.arange(COUNT, dtype=np.float64)


def allgatherv_tuple(wrap):
    (_, ms), (r, mr) = device(mine(), wrap), device(np.zeros(COUNT * n), wrap)
    comm.Allgatherv([ms, COUNT, D], [mr, (counts, displs), D])
    return r, gathered


def allgatherv_four(wrap):
    (_, ms), (r, mr) = device(mine(), wrap), device(np.zeros(COUNT * n), wrap)
    comm.Allgatherv([ms, D], [mr, counts, displs, D])
    return r, gathered


def sendrecv_keywords(wrap):
    (_, ms), (r, mr) = device(mine(), wrap), device(np.zeros(COUNT), wrap)
    comm.Sendrecv(sendbuf=[ms, D], dest=nxt, sendtag=3, recvbuf=[mr, D], source=prv, recvtag=3)
    return r, np.arange(COUNT, dtype=np.float64) + 10 * prv


def isend_recv(wrap):
    (_, ms), (r, mr) = device(mine(), wrap), device(np.zeros(COUNT), wrap)
    req = comm.Isend([ms, D], nxt, 4)
    comm.Recv([mr, D], prv, 4)
    req.Wait()
    return r, np.arange(COUNT, dtype=np.float64) + 10 * prv


def at_offset(wrap):
    whole, _ = device(np.concatenate([np.zeros(2), mine()]), wrap)
    r, mr = device(np.zeros(COUNT), wrap)
    comm.Allreduce([wrap.fromaddress(whole.ctypes.data + 16, COUNT * 8), D], [mr, D])
    return r, total


def allgather_columns(wrap):
    """Strided tensors as such libraries send them: a column (vector type) of a row-major matrix into
    column `rank` of the result (vector resized to one element, so ranks' columns interleave)."""
    mat = np.stack([mine(), -mine()], axis=1)  # COUNT x 2: column 0 is mine()
    (_, ms), (r, mr) = device(mat.ravel(), wrap), device(np.zeros(COUNT * n), wrap)
    col = D.Create_vector(COUNT, 1, 2).Commit()
    into = D.Create_vector(COUNT, 1, n).Create_resized(0, D.Get_extent()[1]).Commit()
    try:
        comm.Allgather([ms, 1, col], [mr, 1, into])
    finally:
        col.Free()
        into.Free()
    return r, gathered.reshape(n, COUNT).T.ravel()


CALLS = [allreduce_typed, allreduce_counted, allreduce_in_place, bcast_bytes, allgatherv_tuple, allgatherv_four,
         sendrecv_keywords, isend_recv, at_offset, allgather_columns]
context = getattr(ctypes.CDLL(None), 'mpigpu_guard_set_context', None)  # the guard names the call in its report
wrong = []
for label, wrap in (('MPI.memory', MPI.memory), ('MPI.buffer', MPI.buffer)):
    for call in CALLS:
        if context is not None:
            context(f'{call.__name__} ({label})'.encode())
        try:
            got, want = call(wrap)
        except mpigpu.Error as exc:
            print(f'{call.__name__} ({label}): refused: {exc}')
            continue
        ok = np.array_equal(got, want)
        print(f'{call.__name__} ({label}): {"ok" if ok else "WRONG"}')
        if not ok:
            wrong.append(f'{call.__name__} ({label}): {got} != {want}')
comm.Barrier()
assert not wrong, wrong
if rank == 0:
    print(f'device memory forms on {n} ranks: done')
