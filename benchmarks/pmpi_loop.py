"""What benchmarks/pmpi_caller.py (device buffers) and pmpi_host_caller.py (host buffers) share (not a user
tool): pmpi_caller_loop.c built and loaded into the process, its loops of MPI_Allreduce through the
interposer and of PMPI_Allreduce (the library alone), and the handles as the interposer takes them."""
import ctypes
import os
import shutil
import subprocess
import tempfile

from mpi4py import MPI

W = ctypes.c_ssize_t  # a handle as a pointer-sized word (MPICH's ints and Open MPI's pointers alike)


def handles(datatype, op, comm):
    """The call's handles as words."""
    return W(datatype.handle), W(op.handle), W(comm.handle)


def _mpi_library_global():
    """The MPI library mpi4py loaded, made visible to later libraries (the loop's PMPI_Allreduce): the pip
    wheels' MPICH is loaded into mpi4py's own scope, where a library loaded after it does not look."""
    with open('/proc/self/maps') as maps:
        paths = {line.split()[-1] for line in maps if '/libmpi' in line and '.so' in line}
    paths = {p for p in paths if p.startswith('/')}  # (not a mapping's '(deleted)' mark)
    for path in sorted(paths):
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def c_loops():
    """(mg_allreduce_loop, mg_pmpi_allreduce_loop) of pmpi_caller_loop.c, built in a temporary folder;
    its MPI_Allreduce resolves in the process's global scope, as ctypes' own lookup does. Each takes
    (sendbuf, recvbuf, count, datatype, op, comm, iters) and returns the loop's seconds, -1 on an error."""
    here = os.path.dirname(os.path.abspath(__file__))
    cc = os.environ.get('CC') or shutil.which('cc') or shutil.which('gcc')
    work = tempfile.mkdtemp()
    lib = os.path.join(work, f'loop{MPI.COMM_WORLD.Get_rank()}.so')
    subprocess.run([cc, '-O2', '-shared', '-fPIC', '-o', lib, os.path.join(here, 'pmpi_caller_loop.c')], check=True)
    _mpi_library_global()
    so = ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
    shutil.rmtree(work)
    fns = so.mg_allreduce_loop, so.mg_pmpi_allreduce_loop
    for fn in fns:
        fn.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, W, W, W, ctypes.c_int)
        fn.restype = ctypes.c_double
    return fns
