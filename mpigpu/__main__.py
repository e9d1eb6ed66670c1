"""python -m mpigpu prog.py [args...]: run an unmodified mpi4py program with mpigpu underneath.

The predefined communicators of mpi4py.MPI are replaced by mpigpu's wrapped ones before the program
starts, so `MPI.COMM_WORLD.Allreduce(cupy_x, cupy_y)` takes mpigpu's path. Communicators the program
derives from them (Split, Dup, ...) are wrapped too. Limits: communicators built from handles by other
means (MPI.Comm.f2py, an intercommunicator's Merge) are plain mpi4py ones.
"""
import runpy
import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ('-h', '--help'):
        print(__doc__.strip())
        return 0 if argv else 2
    from mpi4py import MPI

    from mpigpu import _dropin
    _dropin.install()
    sys.argv = list(argv)
    try:
        if argv[0] == '-m' and len(argv) > 1:
            sys.argv = argv[1:]
            runpy.run_module(argv[1], run_name='__main__', alter_sys=True)
        else:
            runpy.run_path(argv[0], run_name='__main__')
    except SystemExit as exc:
        if exc.code not in (None, 0) and MPI.COMM_WORLD.Get_size() > 1:
            MPI.COMM_WORLD.Abort(exc.code if isinstance(exc.code, int) else 1)
        raise
    except BaseException:
        # as `python -m mpi4py` does: a failing rank ends the job instead of leaving others waiting
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
