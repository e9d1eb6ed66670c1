"""mpigpu.Error: every error mpigpu raises names the call, the argument and the rank.

A mistake that mpi4py reports with a Python exception (a TypeError for a wrong type, a ValueError for a
bad count, a BufferError for an unusable buffer...) raises an mpigpu.Error that is also that exception,
so an `except` clause written for mpi4py catches it (`like(ValueError)` is that class)."""
from mpi4py import MPI


class Error(MPI.Exception):
    """An mpigpu error. It is an `MPI.Exception` carrying an MPI error class (`Get_error_class()`),
    so code that catches MPI errors catches it too; `str()` says call, argument, rank and why."""

    def __init__(self, call, message, *, arg=None, rank=None, error_class=MPI.ERR_OTHER):
        super().__init__(error_class)
        self.call = call
        self.arg = arg
        self.rank = rank
        self.message = message
        where = f'{call}: {arg}: ' if arg else f'{call}: '
        self._text = f'{where}{message}' + (f' (rank {rank})' if rank is not None else '')

    def __str__(self):
        return self._text

    def __repr__(self):
        return f'mpigpu.Error({self._text!r})'


class CommunicatorBroken(Error):
    """A communicator that a fault (peers that never arrived) or an abort has broken: this call and
    every later device call on it raise; free it (Free works) and make another. MPI's class:
    ERR_PROC_FAILED."""

    def __init__(self, call, message, *, arg=None, rank=None, error_class=None):
        super().__init__(call, message, arg=arg, rank=rank,
                         error_class=MPI.ERR_PROC_FAILED if error_class is None else error_class)


class TypeArgumentError(Error, TypeError):
    """An argument of the wrong type (mpi4py raises TypeError)."""


class ValueArgumentError(Error, ValueError):
    """An argument with a wrong value: counts, displacements, ranks (mpi4py raises ValueError)."""


class BufferArgumentError(Error, BufferError):
    """A buffer that cannot be used as given: read-only, not contiguous, malformed (BufferError)."""


class KeyArgumentError(Error, KeyError):
    """An export that lacks a key its protocol requires (mpi4py raises KeyError)."""


class IndexArgumentError(Error, IndexError):
    """An export whose parts disagree in length (mpi4py raises IndexError)."""


_LIKE = {TypeError: TypeArgumentError, ValueError: ValueArgumentError, BufferError: BufferArgumentError,
         KeyError: KeyArgumentError, IndexError: IndexArgumentError}
PYTHON_ERRORS = tuple(_LIKE)  # the exceptions the intake raises for malformed exports


def like(python_error):
    """The mpigpu.Error class that is also `python_error` (TypeError ...), or Error itself."""
    for base in type.mro(python_error) if isinstance(python_error, type) else ():
        if base in _LIKE:
            return _LIKE[base]
    return Error
