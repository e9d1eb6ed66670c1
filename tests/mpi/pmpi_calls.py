"""What the interposer's CPU checks share (pmpi_host_entry.py, pmpi_narrowed.py, pmpi_narrowed_c.py,
pmpi_handler_fake_device.py): MPI calls made through ctypes, as a C caller makes them, on the global
scope's MPI_* (the interposer's wherever it is in place), their arguments as C passes them, and the tally of
checks each rank counts (`pmpi_calls.checks`)."""
import ctypes

from mpi4py import MPI

c = ctypes.CDLL(None)
W, L = ctypes.c_ssize_t, ctypes.c_longlong  # a handle travels as a word; an MPI_Count
IN_PLACE = ctypes.c_void_p(int(MPI.IN_PLACE) & (2 ** (8 * ctypes.sizeof(ctypes.c_void_p)) - 1))
RANK = MPI.COMM_WORLD.Get_rank()
checks = 0


def p(a):
    """A NumPy array's data pointer (keep the array alive through the call)."""
    return ctypes.c_void_p(a.ctypes.data)


def h(obj):
    """An mpi4py handle object as its word."""
    return W(obj.handle)


def counted(k=1):
    global checks
    checks += k


def same(got, want, what):
    counted()
    assert got.tobytes() == want.tobytes(), f'rank {RANK}: {what}: {got[:8]} != {want[:8]}'


def call(name, *args):
    rc = getattr(c, 'MPI_' + name)(*args)
    assert rc == MPI.SUCCESS, f'rank {RANK}: MPI_{name} returned {rc}: {MPI.Get_error_string(rc)}'
