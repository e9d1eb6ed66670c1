"""python -m mpigpu: run an unmodified mpi4py program with mpigpu underneath.

usage: python -m mpigpu [options] <pyfile> [arg] ...
   or: python -m mpigpu [options] -m <mod> [arg] ...
   or: python -m mpigpu [options] -c <cmd> [arg] ...
   or: python -m mpigpu [options] - [arg] ...        (program read from standard input)

options:
  -h, --help     show this help and exit
  --version      show mpigpu's version and exit
  --pmpi-path    print the path of mpigpu's MPI interposer and exit: a program that calls MPI from C,
                 C++ or Fortran passes device memory to MPI under
                 LD_PRELOAD=$(python -m mpigpu --pmpi-path) mpiexec ... ./program

What `python -m mpi4py` takes, run the same way (sys.argv, sys.path, __main__), after mpi4py.MPI's
predefined communicators, datatypes and ops and its communicator, Win, File and Op classes have been
replaced by mpigpu's, so `MPI.COMM_WORLD.Allreduce(cupy_x, cupy_y)` takes mpigpu's path;
communicators, datatypes, windows and files made from them, or from handles (MPI.Comm.f2py), are
mpigpu's too. Limit: mpi4py's C API (PyMPIComm_New, used by Cython and C extensions) makes plain
mpi4py objects.

MPI calls made below Python (mpi4jax's XLA calls, Cython or C extensions, ctypes) with device
memory run on mpigpu's paths too: the interposer is in place for the whole process (MPIGPU_PMPI,
docs/tuning.md; docs/interposer.md).

Exit status: the program's (sys.exit(N) gives N); an exception the program does not catch ends the
whole job through MPI_Abort with status 1 (KeyboardInterrupt: 130), as with `python -m mpi4py`, so
the other ranks do not wait forever; a bad command line gives 2 (`python -m mpi4py` gives 1 there).
"""
import sys

from ._face.cli import UsageError, say, usage_error

_PROG = 'python -m mpigpu'
_HINT = f'usage: {_PROG} [options] <pyfile> | -m <mod> | -c <cmd> | - [arg] ...  (see {_PROG} --help)'


def install():
    """Put mpigpu under mpi4py: mpi4py.MPI's predefined communicators, datatypes and ops, its
    communicator classes and its Win, File and Op classes become mpigpu's (mpigpu/_face/dropin.py says
    which), so a program that uses mpi4py.MPI passes GPU arrays through mpigpu."""
    from mpigpu._face import dropin as _dropin
    _dropin.install()


def parse(argv):
    """(what to do, the program's command line): ('help' | 'version' | 'run', args). Raises UsageError."""
    args = list(argv)
    while args and args[0].startswith('-') and args[0] not in ('-m', '-c', '-'):
        opt = args[0]
        if opt in ('-h', '-help', '--help'):
            return 'help', []
        if opt in ('-version', '--version'):
            return 'version', []
        if opt == '--pmpi-path':
            return 'pmpi-path', []
        raise UsageError(f'unknown option {opt!r}')
    if not args:
        raise UsageError('no program given')
    if args[0] in ('-m', '-c') and len(args) < 2:
        raise UsageError(f'argument expected after {args[0]}')
    return 'run', args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        action, args = parse(argv)
    except UsageError as exc:
        return usage_error(_PROG, exc, _HINT)
    if action == 'help':
        say(__doc__.strip())
        return 0
    if action == 'pmpi-path':
        from mpigpu import _interpose
        try:
            print(_interpose.path())
        except FileNotFoundError as exc:
            return usage_error(_PROG, UsageError(str(exc)), _HINT)
        return 0
    if action == 'version':
        import mpigpu
        say(f'mpigpu {mpigpu.__version__}')
        return 0
    install()
    # mpi4py's own runner runs the program (the -c/-m/-/path forms, sys.argv and sys.path as it sets
    # them) and marks the job for MPI_Abort at exit when the program fails, as `python -m mpi4py` does.
    from mpi4py.run import run_command_line, set_abort_status
    try:
        run_command_line(args)
    except (SystemExit, KeyboardInterrupt) as exc:
        set_abort_status(exc)
        raise
    except BaseException:
        set_abort_status(1)
        raise
    return 0


if __name__ == '__main__':
    sys.exit(main())
