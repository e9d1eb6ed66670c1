"""Device arrays that are not contiguous (permuted axes, sliced with steps, negative strides) passed as bare
buffers: refused with BufferError by default, as mpi4py refuses them; with MPIGPU_STRIDED_ARRAYS=1
(mpigpu/_describe/strided.py) each call sends the elements in the array's logical order and receives
into its strides, which is what plain mpi4py does with a contiguous copy of the array. Point-to-point,
collectives, reductions (the element type decides) and the mirrored methods, with the fake CUDA layer.
Run under mpiexec -n 1..3."""

import numpy as np
from mpi4py import MPI

from fake_device import device_memory, install_unless_gpu

# MPIGPU_CHECK_ON_GPU=1: the same checks on CuPy views of a real GPU's arrays
cp = install_unless_gpu()
GPU = cp is not None
import mpigpu  # noqa: E402
from mpigpu._base.config import config  # noqa: E402

world = mpigpu.COMM_WORLD
plain = MPI.COMM_WORLD
rank, n = world.Get_rank(), world.Get_size()
nxt, prv = (rank + 1) % n, (rank - 1) % n
checks = 0


class Strided:
    """A NumPy view exported as a CUDA array with its strides; its base's memory is device memory."""

    def __init__(self, view):
        self.view = view
        base = view.base if view.base is not None else view
        device_memory(self, base.ctypes.data, base.nbytes)
        self.__cuda_array_interface__ = {'shape': view.shape, 'typestr': view.dtype.str,
                                         'data': (view.ctypes.data, False), 'version': 3,
                                         'strides': view.strides, 'stream': 1}


VIEWS = {  # name -> (shape of the fresh array, the view of it)
    'transposed': ((3, 4, 5), lambda a: a.transpose(1, 0, 2)),
    'stepped': ((40,), lambda a: a[3::4]),
    'reversed-columns': ((5, 6), lambda a: a[:, ::-2]),
    '3d': ((4, 5, 6), lambda a: a[1:, ::-1, ::3].transpose(2, 0, 1)),
    'reversed-rows': ((6, 5), lambda a: a[::-1, ::2]),
}


def views(dtype, salt):
    """Non-contiguous views of fresh arrays (NumPy views: the host side and the fake layer's device)."""
    def fresh(shape):
        return (np.arange(int(np.prod(shape))) * (rank + 1) + salt).astype(dtype).reshape(shape)
    return {k: make(fresh(shape)) for k, (shape, make) in VIEWS.items()}


class OnGPU:
    """The same view of a CuPy copy of the view's base: what the device side passes (dev), read back
    into the NumPy view (sync)."""

    def __init__(self, view):
        self.view = view
        self.base = cp.asarray(view.base)
        first = (view.ctypes.data - view.base.ctypes.data)
        self.dev = cp.ndarray(view.shape, view.dtype, self.base.data + first, strides=view.strides)

    def sync(self):
        self.view.base[...] = cp.asnumpy(self.base)


def dev(view):
    """The device side of a view: a CuPy view on a GPU, the view exported with its strides otherwise."""
    if GPU:
        g = OnGPU(view)
        _live.append(g)
        return g.dev
    return Strided(view)


_live = []


def sync():
    """Device results into the NumPy views (on a GPU); the fake layer's device memory is the views'."""
    for g in _live:
        g.sync()
    _live.clear()


def same(got, want, what):
    global checks
    checks += 1
    assert np.array_equal(np.asarray(got), np.asarray(want)), f'rank {rank}: {what}: {got} != {want}'


# by default such arrays are refused as mpi4py refuses them (BufferError), before any transfer
probe = views(np.float64, 1)['stepped']
try:
    world.Sendrecv(dev(probe), nxt, 0, dev(views(np.float64, 2)['stepped']), prv, 0)
except BufferError:
    checks += 1
else:
    raise AssertionError(f'rank {rank}: a strided array was taken without MPIGPU_STRIDED_ARRAYS')
_live.clear()
world.Barrier()
config.strided_arrays = True  # MPIGPU_STRIDED_ARRAYS=1

for dtype in (np.float64, np.int32, np.float32):
    src, dst, dst2 = views(dtype, 1), views(dtype, 100), views(dtype, 200)
    for key in src:
        s, d = src[key], dst[key]
        untouched = d.base.copy()
        # Sendrecv around the ring: the receiver's view gets the sender's elements in logical order
        world.Sendrecv(dev(s), nxt, 1, dev(d), prv, 1)
        sync()
        want = np.empty(d.shape, dtype)
        plain.Sendrecv(np.ascontiguousarray(s), nxt, 1, want, prv, 1)
        same(d, want, f'{key} {np.dtype(dtype).name} Sendrecv')
        # the base's other elements are untouched
        mark = np.zeros(d.base.size, dtype)
        first = (d.ctypes.data - d.base.ctypes.data) // d.itemsize
        np.lib.stride_tricks.as_strided(mark[first:], shape=d.shape, strides=d.strides)[...] = 1
        outside = (mark == 0).reshape(d.base.shape)
        same(d.base[outside], untouched[outside], f'{key} {np.dtype(dtype).name} Sendrecv outside the view')
        d2 = dst2[key]
        # Isend / Irecv
        r = world.Irecv(dev(d2), prv, 2)
        world.Isend(dev(s), nxt, 2).Wait()
        r.Wait()
        sync()
        same(d2, want, f'{key} {np.dtype(dtype).name} Isend/Irecv')
        # collectives
        s_host = np.ascontiguousarray(s)
        out = views(dtype, 300)[key]
        world.Allreduce(dev(s), dev(out), op=MPI.SUM)
        sync()
        ref = np.empty_like(s_host)
        plain.Allreduce(s_host, ref, op=MPI.SUM)
        same(out, ref, f'{key} {np.dtype(dtype).name} Allreduce')
        b = views(dtype, 400 + rank)[key]
        world.Bcast(dev(b), root=n - 1)
        sync()
        ref = np.ascontiguousarray(views(dtype, 400 + rank)[key])
        plain.Bcast(ref, root=n - 1)
        same(b, ref, f'{key} {np.dtype(dtype).name} Bcast')
        g = np.zeros((n,) + s.shape, dtype)
        g_dev = np.zeros((n * s.size * 2,), dtype)[::2].reshape((n,) + s.shape)  # strided receive buffer
        world.Allgather(dev(s), dev(g_dev))
        sync()
        plain.Allgather(s_host, g)
        same(g_dev, g, f'{key} {np.dtype(dtype).name} Allgather')
        sc = np.zeros(s.size * 2, dtype)[::2]
        world.Scan(dev(s), dev(sc.reshape(s.shape)), op=MPI.SUM)
        sync()
        ref = np.empty(s.size, dtype)
        plain.Scan(s_host.reshape(-1), ref, op=MPI.SUM)
        same(sc, ref, f'{key} {np.dtype(dtype).name} Scan')

# a Fortran-contiguous array (a transposed matrix) is one block: its memory order, as mpi4py reads it
for dtype in (np.float64,):
    a = (np.arange(24) * (rank + 1)).astype(dtype).reshape(6, 4).T
    got, want = np.zeros((6, 4), dtype).T, np.zeros((6, 4), dtype).T
    world.Sendrecv(dev(a), nxt, 5, dev(got), prv, 5)
    sync()
    plain.Sendrecv(a, nxt, 5, want, prv, 5)
    same(got, want, 'Fortran-contiguous Sendrecv')

# PyTorch tensors with permuted axes (their strides come from the tensor, not an array interface)
torch = None
if GPU:
    try:
        import torch
    except ImportError:
        pass
if torch is not None:
    dev_ = torch.device('cuda', torch.cuda.current_device())
    t = (torch.arange(60, dtype=torch.float32, device=dev_) * (rank + 1)).reshape(3, 4, 5).permute(1, 0, 2)
    r = torch.zeros(3, 4, 5, device=dev_).permute(1, 0, 2)
    assert not t.is_contiguous() and not r.is_contiguous()
    world.Sendrecv(t, nxt, 9, r, prv, 9)
    same(r.cpu().numpy(), (np.arange(60, dtype=np.float32) * (prv + 1)).reshape(3, 4, 5).transpose(1, 0, 2),
         'torch permuted Sendrecv')
    r = torch.zeros(3, 4, 5, device=dev_).permute(1, 0, 2)
    world.Allreduce(t, r, op=MPI.SUM)
    same(r.cpu().numpy(), (np.arange(60, dtype=np.float32) * sum(range(1, n + 1))).reshape(3, 4, 5).transpose(1, 0, 2),
         'torch permuted Allreduce')

world.Barrier()
total = world.reduce(checks, root=0)
if rank == 0:
    print(f'strided device arrays: {total} checks identical to mpi4py on contiguous copies on {n} ranks')
