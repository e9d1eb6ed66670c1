"""The same blocking call on each GPU array library's arrays, in one run: CuPy arrays, PyTorch tensors
(read from their attributes on the fast paths), and PyTorch tensors of a subclass (which the fast paths
decline: the general path's DLPack export with its stream handshake, as every PyTorch tensor took before);
and CuPy arrays in mpi4py's [array, datatype] specification (the fast paths) and [array, typecode] (the
general path, as every specification took before).
Alternating rounds, the best round of each, the slowest rank, us per call.

    mpirun -n 4 python3 -m mpi4py benchmarks/framework_probe.py     # one rank per GPU
"""
import argparse

import cupy as cp
import torch

import mpigpu
from mpigpu import MPI
from probe_common import alternating

p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
p.add_argument('--bytes', default='1024,65536,1048576', help='message sizes (comma separated)')
p.add_argument('--calls', type=int, default=300, help='calls per round')
p.add_argument('--rounds', type=int, default=5, help='rounds of each, alternating')
args = p.parse_args()

comm = mpigpu.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
ngpu = cp.cuda.runtime.getDeviceCount()
cp.cuda.Device(rank % ngpu).use()
torch.cuda.set_device(rank % ngpu)


class Declined(torch.Tensor):
    """A tensor the fast paths do not read (a subclass, named as PyTorch's own so that the CUDA Array
    Interface reader declines it too): the general path takes it, as it took every tensor before. No
    __torch_function__ of its own, so PyTorch's calls on it cost what they cost on a tensor."""
    __torch_function__ = torch._C._disabled_torch_function_impl


Declined.__module__ = 'torch.probe'


def forms(nbytes):
    count = nbytes // 4
    c = (cp.arange(count, dtype=cp.float32), cp.zeros(count, cp.float32))
    t = (torch.arange(count, dtype=torch.float32, device='cuda'), torch.zeros(count, device='cuda'))
    d = (t[0].as_subclass(Declined), t[1].as_subclass(Declined))
    dst = (rank + 1) % n, (rank - 1) % n
    out = {}
    for lib, (x, y) in (('cupy', c), ('torch', t), ('torch, general path', d)):
        out[f'Allreduce {lib}'] = lambda x=x, y=y: comm.Allreduce(x, y)
    out['Allreduce cupy [array, MPI.FLOAT]'] = lambda: comm.Allreduce([c[0], MPI.FLOAT], [c[1], MPI.FLOAT])
    # a typecode instead of the datatype: the same call, which the fast paths leave to the general path
    out["Allreduce cupy [array, 'f'] (general path)"] = lambda: comm.Allreduce([c[0], 'f'], [c[1], 'f'])
    for lib, (x, y) in (('cupy', c), ('torch', t), ('torch, general path', d)):
        out[f'Sendrecv {lib}'] = lambda x=x, y=y: comm.Sendrecv(x, dst[0], 7, y, dst[1], 7)
    out['Sendrecv cupy [array, MPI.FLOAT]'] = lambda: comm.Sendrecv([c[0], MPI.FLOAT], dst[0], 7, [c[1], MPI.FLOAT],
                                                                     dst[1], 7)
    out["Sendrecv cupy [array, 'f'] (general path)"] = lambda: comm.Sendrecv([c[0], 'f'], dst[0], 7, [c[1], 'f'],
                                                                              dst[1], 7)
    return out


comm.Allreduce(cp.zeros(1, cp.float32), cp.zeros(1, cp.float32))  # the device team, set up once
for nbytes in [int(b) for b in args.bytes.split(',')]:
    f = forms(nbytes)
    before = mpigpu._cuda.device.engine_fast_calls()
    best = alternating(comm, f, args.rounds, args.calls)
    fast = mpigpu._cuda.device.engine_fast_calls() - before
    if rank == 0:
        print(f'{nbytes} B, {n} ranks ({fast} engine calls on the fast path): '
              + ', '.join(f'{k} {v:.1f}' for k, v in best.items()))
