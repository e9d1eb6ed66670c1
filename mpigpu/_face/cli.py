"""What mpigpu's command-line tools share: output from rank 0 only, and argument errors told once,
as one line and a usage hint, with exit status 2 on every rank.

Every rank of an `mpiexec -n N tool ...` job parses the same arguments and finds the same error;
printing it from each would show it N times. Importing mpigpu has initialized MPI already, so rank 0
of COMM_WORLD speaks for all; every rank returns the same status, so the job ends normally (no abort)
with status 2, as argparse's tools and Python itself do for a bad command line.
"""
import sys

USAGE_STATUS = 2


class UsageError(Exception):
    """A bad command line: its message is the one line the tool prints."""


def world_rank():
    """This process's rank in COMM_WORLD (0 where MPI is not running)."""
    from mpi4py import MPI
    if MPI.Is_initialized() and not MPI.Is_finalized():
        return MPI.COMM_WORLD.Get_rank()
    return 0


def say(text, file=None):
    """Print `text` on rank 0 only (to stdout unless `file`)."""
    if world_rank() == 0:
        print(text, file=file or sys.stdout, flush=True)


def usage_error(prog, message, hint):
    """Tell a bad command line once (rank 0, stderr): `prog: error: message`, then the hint line.
    Returns the exit status every rank should end with."""
    say(f'{prog}: error: {message}\n{hint}', sys.stderr)
    return USAGE_STATUS
