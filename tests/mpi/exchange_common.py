"""What the exchange transport's MPI checks share (exchange_collectives.py, exchange_datatypes.py): the
arrays on the device (CuPy on a GPU, the fake layer's elsewhere), the I* and *_init forms of a call
compared with mpi4py's, the stream= form too, and the placements of the ranks' buffers."""
import os

os.environ.setdefault('MPIGPU_EXCHANGE_MIN_BYTES', '0')  # these calls are small: the transport takes them all
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

from fake_device import install_unless_gpu  # noqa: E402

cp = install_unless_gpu()
engine = cp is not None or os.environ.get('EXCHANGE_ENGINE') == '1'
one_node = int(os.environ.get('MPIGPU_SIMULATE_NODES', '0') or 0) <= 1  # else no team spans the ranks
if cp is None and engine:
    from fake_engine import install_engine
    FakeCAI = install_engine()
elif cp is None:
    from fake_device import FakeCAI

from mpigpu._paths import exchange  # noqa: E402

PLACEMENTS = {'device': lambda r, root: True, 'host': lambda r, root: False,
              'alternate': lambda r, root: r % 2 == 0, 'root only': lambda r, root: r == root}


def device(arr):
    return cp.asarray(arr) if cp is not None else FakeCAI(arr.copy())


def values(obj):
    if cp is not None and isinstance(obj, cp.ndarray):
        return cp.asnumpy(obj)
    return np.asarray(obj.a if hasattr(obj, '__cuda_array_interface__') else obj)


def placed(arr, on_device):
    return device(arr) if on_device else arr.copy()


def output(args, k):
    x = args[k]
    return x[0] if type(x) in (list, tuple) else x


def i_name(name):
    """The non-blocking form's name: Ialltoall, Ineighbor_alltoall."""
    return 'I' + name[0].lower() + name[1:]


def _checked(label, a, b, k, taken, expect):
    """Output k of mpigpu's arguments `a` against mpi4py's `b` (k None: this rank has none), and the
    exchange path taken `expect` times. Returns the checks made."""
    if k is not None:
        got, want = values(output(a, k)), values(output(b, k))
        assert np.array_equal(got, want), f'{label}: {got} != {want}'
    assert taken == expect, f'{label}: exchange path taken {taken} times, expected {expect}'
    return 1 if k is None else 2


def nonblocking(topo, ptopo, name, build, dev, root, k, where, expect):
    """The I* form of the same call, waited for (device buffers on the transport where the blocking
    call took it: its team is up by then); its result against mpi4py's. Returns the checks made."""
    a, b, k = build(dev, root)
    before = exchange.calls()
    req = getattr(topo, i_name(name))(*a)
    req.Wait()
    taken = exchange.calls() - before
    getattr(ptopo, i_name(name))(*b).Wait()
    return _checked(f'{i_name(name)} ({where})', a, b, k, taken, expect)


def streamed(topo, ptopo, name, build, dev, root, where, expect):
    """The stream= form of the same call: the ranks with device buffers pass a stream (the inputs'
    producers synchronized first; the stream synchronized after), the others call it plainly, so a mixed
    placement takes the host MPI call after the stream's synchronize. Its result against mpi4py's.
    Returns the checks made."""
    a, b, k = build(dev, root)
    stream = None
    if dev:
        if cp is not None:
            cp.cuda.Device().synchronize()
            stream = cp.cuda.Stream(non_blocking=True)
        else:
            stream = 0
    before = exchange.calls()
    if stream is not None:
        getattr(topo, name)(*a, stream=stream)
        if cp is not None:
            stream.synchronize()
    else:
        getattr(topo, name)(*a)
    taken = exchange.calls() - before
    getattr(ptopo, name)(*b)
    return _checked(f'{name}(stream=) ({where})', a, b, k, taken, expect)


def poison(x):
    """Overwrites an output (CuPy, fake device or NumPy array) so that a round that writes nothing shows."""
    if cp is not None and isinstance(x, cp.ndarray):
        x.fill(-1)
    else:
        (x.a if hasattr(x, '__cuda_array_interface__') else x)[...] = -1


def persistent(topo, ptopo, name, build, dev, root, where, expect, rounds=2):
    """The *_init form of the same call, started `rounds` times (the output poisoned before each round),
    against mpi4py's blocking call. Returns the checks made. (A reduction in place reads what its last
    round wrote: one round.)"""
    a, b, k = build(dev, root)
    getattr(ptopo, name)(*b)
    try:
        req = getattr(topo, name + '_init')(*a)
    except NotImplementedError:  # a host MPI without persistent collectives (MPI < 4): mpi4py's too
        assert not expect, f'{name}_init ({where}): the transport needs no host MPI call'
        return 0
    made = 0
    in_place = any(x is MPI.IN_PLACE for x in a[:2])  # this rank's output holds its input
    for _round in range(rounds):
        if k is not None and not in_place:
            poison(output(a, k))
        before = exchange.calls()
        req.Start()
        req.Wait()
        taken = exchange.calls() - before
        made += _checked(f'{name}_init ({where})', a, b, k, taken, expect)
    req.Free()
    return made


def compared(topo, ptopo, name, a, b, k, where):
    """Runs call `name` with mpigpu's arguments `a` on `topo` and mpi4py's `b` on `ptopo`, compares the
    output (argument k; None: this rank has none). Returns (exchange calls taken, checks made)."""
    before = exchange.calls()
    getattr(topo, name)(*a)
    taken = exchange.calls() - before
    getattr(ptopo, name)(*b)
    if k is None:
        return taken, 0
    got, want = values(output(a, k)), values(output(b, k))
    assert np.array_equal(got, want), f'{where}: {got} != {want}'
    return taken, 1
