"""mpigpu.Error: every error mpigpu raises names the call, the argument and the rank."""
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
