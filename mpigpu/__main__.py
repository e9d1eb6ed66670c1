"""python -m mpigpu: run an unmodified mpi4py program with mpigpu underneath.

usage: python -m mpigpu [options] <pyfile> [arg] ...
   or: python -m mpigpu [options] -m <mod> [arg] ...
   or: python -m mpigpu [options] -c <cmd> [arg] ...
   or: python -m mpigpu [options] - [arg] ...        (program read from standard input)

options:
  -h, --help   show this help and exit
  --version    show mpigpu's version and exit

What `python -m mpi4py` takes, run the same way (sys.argv, sys.path, __main__), after mpi4py.MPI's
predefined communicators have been replaced by mpigpu's, so `MPI.COMM_WORLD.Allreduce(cupy_x, cupy_y)`
takes mpigpu's path; communicators derived from them (Split, Dup, ...) are mpigpu's too. Limits:
communicators built from handles by other means (MPI.Comm.f2py, an intercommunicator's Merge) are
plain mpi4py ones.

Exit status: the program's (sys.exit(N) gives N); an exception the program does not catch ends the
whole job through MPI_Abort with status 1 (KeyboardInterrupt: 130), as with `python -m mpi4py`, so
the other ranks do not wait forever; a bad command line gives 2 (`python -m mpi4py` gives 1 there).
"""
import sys

from ._cli import UsageError, say, usage_error

_PROG = 'python -m mpigpu'
_HINT = f'usage: {_PROG} [options] <pyfile> | -m <mod> | -c <cmd> | - [arg] ...  (see {_PROG} --help)'


def install():
    """Put mpigpu under mpi4py: mpi4py.MPI's predefined communicators become mpigpu's wrapped ones,
    so a program that uses mpi4py.MPI passes GPU arrays through mpigpu. The one place that decides what
    `python -m mpigpu` replaces."""
    from mpi4py import MPI

    import mpigpu
    MPI.COMM_WORLD = mpigpu.COMM_WORLD
    MPI.COMM_SELF = mpigpu.COMM_SELF


def parse(argv):
    """(what to do, the program's command line): ('help' | 'version' | 'run', args). Raises UsageError."""
    args = list(argv)
    while args and args[0].startswith('-') and args[0] not in ('-m', '-c', '-'):
        opt = args[0]
        if opt in ('-h', '-help', '--help'):
            return 'help', []
        if opt in ('-version', '--version'):
            return 'version', []
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
