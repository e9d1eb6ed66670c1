"""The MPI interposer (pmpi/, a C library) from Python: where it is, putting it in place for the
process, and what it reports.

The interposer defines the buffer-taking MPI_* functions of its table (functions.py) over MPI's
profiling interface: host buffers go to PMPI_* untouched, a call with a device buffer goes to the
handler mpigpu registers (_face/interposed.py: the call runs on mpigpu's paths), or, in a process without one,
to the MPI library where it is CUDA-aware, else through host copies. So code that calls MPI below
Python (mpi4jax's XLA calls, Cython and C extensions, C libraries) passes device pointers on any MPI.

It is in place when loaded before mpi4py loads the MPI library (`load_early`, the first thing
`import mpigpu` does where MPIGPU_PMPI asks for it: `python -m mpigpu` by default), with RTLD_GLOBAL:
the MPI library's users that load after it bind MPI_* to its definitions. A program without Python
preloads it: LD_PRELOAD=$(python -m mpigpu --pmpi-path).
"""
import ctypes
import importlib.util
import os
import sys

from .functions import REQUEST_TABLE, TABLE

_lib = None
_status = 'off'

# Python's options that take the next word as their argument (python [options] -m mpigpu ...).
_OPTIONS_WITH_ARGUMENT = ('-W', '-X', '--check-hash-based-pycs')


def path():
    """The interposer's shared library (its file; raises FileNotFoundError in a build without it)."""
    spec = importlib.util.find_spec('mpigpu._interpose._pmpi')
    if spec is None or not spec.origin:
        raise FileNotFoundError('mpigpu was built without its MPI interposer (pmpi/)')
    return spec.origin


def runs_as_runner(argv=None):
    """True when this interpreter was started as `python [options] -m mpigpu ...`."""
    argv = list(getattr(sys, 'orig_argv', ()) if argv is None else argv)
    i = 1
    while i < len(argv):
        word = argv[i]
        if word == '-m':
            return argv[i + 1:i + 2] == ['mpigpu']
        if word.startswith('-m'):
            return word[2:] == 'mpigpu'
        if not word.startswith('-') or word in ('-c', '-'):
            return False
        i += 2 if word in _OPTIONS_WITH_ARGUMENT else 1
    return False


def load_early(setting):
    """Loads the interposer for the whole process where `setting` (MPIGPU_PMPI: 'auto', '1', '0') asks for
    it; 'auto': when running as `python -m mpigpu`. Called by `import mpigpu` before mpi4py.MPI is
    imported; a process that imported mpi4py.MPI first gets it too, reported as 'late' (the MPI calls
    mpi4py had bound already bypass it)."""
    global _lib, _status
    if _lib is not None:
        return
    if hasattr(ctypes.CDLL(None), 'mpigpu_pmpi_set_handler'):  # preloaded (LD_PRELOAD) into this process
        lib = ctypes.CDLL(None)
        _check_table(lib)
        _lib, _status = lib, 'preloaded'
        return
    if setting == '0' or (setting == 'auto' and not runs_as_runner()):
        return
    late = 'mpi4py.MPI' in sys.modules
    try:
        lib = ctypes.CDLL(path(), mode=os.RTLD_GLOBAL | os.RTLD_NOW)
    except OSError as exc:
        _status = f'unavailable: {exc}'
        return
    except FileNotFoundError as exc:
        _status = f'unavailable: {exc}'
        return
    _check_table(lib)
    _lib = lib
    _status = 'late' if late else 'on'


def _check_table(lib):
    lib.mpigpu_pmpi_signature.restype = ctypes.c_char_p
    if lib.mpigpu_pmpi_count() != len(TABLE):
        raise ImportError('mpigpu: the MPI interposer was built from another table; rebuild mpigpu')
    for i, f in enumerate(TABLE):
        sig = ' '.join(f'{p.name}:{p.kind}' for p in f.params)
        if lib.mpigpu_pmpi_signature(i).decode() != sig:
            raise ImportError(f'mpigpu: the MPI interposer was built from another table (MPI_{f.name}); rebuild')
    lib.mpigpu_pmpi_request_call.restype = ctypes.c_char_p
    for i, f in enumerate(REQUEST_TABLE + (None,)):
        got = lib.mpigpu_pmpi_request_call(i)
        if (got.decode() if got else None) != (f'MPI_{f.name}' if f else None):
            raise ImportError('mpigpu: the MPI interposer was built from another table of request calls; rebuild')


def library():
    """The loaded interposer (ctypes.CDLL), or None."""
    return _lib


def status():
    """'on' (in place before the MPI library loaded), 'preloaded' (LD_PRELOAD put it there), 'late', 'off',
    or 'unavailable: <why>'."""
    return _status


def lower_cuda_aware():
    """Whether the MPI library below the interposer is CUDA-aware (None: the interposer is not loaded)."""
    return None if _lib is None else bool(_lib.mpigpu_pmpi_lower_cuda_support())
