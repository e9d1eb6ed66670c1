"""Fortran MPI calls from a Fortran extension in a `python -m mpigpu` process (as f2py builds one, loaded
with RTLD_LOCAL: tests/pmpi/fortran_python_calls.f90), with host arrays and with device memory: the
interposer's Fortran bindings convert each call to C's and hand it to mpigpu's handler; the persistent
calls make mpigpu's persistent requests behind proxies, which the Fortran MPI_STARTALL and MPI_WAITALL
(converted while a proxy is alive) start and complete. On CPUs: the fake CUDA layer plays device memory
for mpigpu, the fake driver (FAKE_LIBCUDA) tells the interposer where it is. Needs mpi4py on the MPI whose
Fortran bindings built the extension (Open MPI: MPI4PY_MPIABI=openmpi). Run by tests/test_pmpi.py."""
import ctypes
import mmap
import os

import numpy as np

fake_driver = ctypes.CDLL(os.environ['FAKE_LIBCUDA'], mode=os.RTLD_GLOBAL)
fake_driver.cuInit(0)
fake_driver.fake_cuda_register.argtypes = (ctypes.c_size_t, ctypes.c_size_t)

from fake_device import install, register_device  # noqa: E402

install()
from mpi4py import MPI  # noqa: E402

from mpigpu import _interpose  # noqa: E402
from mpigpu._face import interposed as handler  # noqa: E402

assert _interpose.status() == 'on', _interpose.status()
ext = ctypes.CDLL(os.environ['FORTRAN_PYTHON_LIB'])  # (RTLD_LOCAL, as Python loads an extension module)
I = ctypes.c_int
for name in ('f_allreduce', 'f_ring_nonblocking', 'f_ring_persistent'):
    getattr(ext, name).restype = None
comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
prev = (rank - 1) % n
kept = []


def device(a):
    """A copy of `a` in its own mapping, from now on device memory for mpigpu's layer and the interposer."""
    mapped = np.frombuffer(mmap.mmap(-1, max(a.nbytes, 1)), dtype=a.dtype, count=a.size).reshape(a.shape)
    mapped[...] = a
    register_device(mapped.ctypes.data, mapped.nbytes)
    fake_driver.fake_cuda_register(mapped.ctypes.data, mapped.nbytes)
    kept.append(mapped)
    return mapped


def ptr(a):
    return ctypes.c_void_p(a.ctypes.data)


N, ROUNDS = 64, 3
checks, failures = 0, []


def check(ok, what):
    global checks
    checks += 1
    if not ok:
        failures.append(what)
        print(f'pmpi_fortran_python: FAIL {what} on rank {rank}', flush=True)


for where, make in (('host', lambda a: a.copy()), ('device', device)):
    before = handler.calls()
    err = I(-99)
    s, r = make(np.arange(N, dtype=np.int32) + rank), make(np.zeros(N, np.int32))
    ext.f_allreduce(ptr(s), ptr(r), I(N), ctypes.byref(err))
    want = np.arange(N, dtype=np.int32) * n + n * (n - 1) // 2
    check(err.value == 0 and (r == want).all(), f'{where} MPI_ALLREDUCE ({err.value}, {r[:4]})')
    s, r = make(np.arange(N, dtype=np.int32) + 1000 * rank), make(np.zeros(N, np.int32))
    ext.f_ring_nonblocking(ptr(s), ptr(r), I(N), ctypes.byref(err))
    want = np.arange(N, dtype=np.int32) + 1000 * prev
    check(err.value == 0 and (r == want).all(), f'{where} MPI_ISEND and MPI_IRECV, MPI_WAITALL ({err.value}, {r[:4]})')
    s, r, total = make(np.zeros(N, np.int32)), make(np.zeros(N, np.int32)), np.zeros(N, np.int32)
    ext.f_ring_persistent(ptr(s), ptr(r), I(N), I(ROUNDS), I(100 * rank), ptr(total), ctypes.byref(err))
    want = ROUNDS * 100 * prev + ROUNDS * (ROUNDS + 1) // 2
    check(err.value == 0 and (total == want).all(),
          f'{where} persistent rounds, MPI_STARTALL and MPI_WAITALL ({err.value}, {total[:4]} != {want})')
    if where == 'device':  # (the handler and the engine's entry count the device calls they ran)
        check(handler.calls() > before, 'the device calls reached the handler')
failed = comm.allreduce(len(failures))
if rank == 0:
    print(f'pmpi_fortran_python: {n} ranks, {checks} checks, {failed} failed on all ranks', flush=True)
if failed:
    raise SystemExit(1)
