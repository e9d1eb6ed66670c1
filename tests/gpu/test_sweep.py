"""The collectives swept on COMM_WORLD: every collective x dtype x op x algorithm x size class (0,
fewer than the ranks, odd, not a multiple of the vector width or chunk, unaligned offsets), in place
and out of place, non-zero roots, CuPy and PyTorch buffers; bfloat16 through PyTorch; the direct
kernel with its stages on separate warps. recvbuf is poisoned before every call; results are checked
against a NumPy reference (float64 for floats) and for bitwise equality across ranks.
`mpirun -n N python -m pytest -p no:cacheprovider tests/gpu/test_sweep.py [--quick]`."""
import hashlib
import traceback

import pytest

import gpucheck as gc
from gpucheck import MPI, gen, record, settings, sweep, sweep_algo, torch

ALGOS = ('ll', 'll128', 'll128-twoshot', 'oneshot', 'twoshot', 'ring', 'auto')


def pytest_generate_tests(metafunc):
    if 'algo' in metafunc.fixturenames:
        metafunc.parametrize('algo', ('auto',) if metafunc.config.getoption('quick', False) else ALGOS)


def test_world_sweep(world, algo):
    sweep_algo(world, algo)
    if algo == 'auto':
        gc.say('world engine:', world.engine_status())


@pytest.mark.skipif(torch is None, reason='bfloat16 arrays need PyTorch (CuPy has no bfloat16)')
def test_bfloat16(world):
    """bfloat16 Allreduce (SUM, MAX) through PyTorch, against a float64 reference."""
    n, r = world.Get_size(), world.Get_rank()
    for count in (1, 1001, 300003):
        for op in ('SUM', 'MAX'):
            rows = [torch.from_numpy(gen(k, count, 'float32', op, 5)).to(torch.bfloat16) for k in range(n)]
            ref = rows[0].float().double()
            for x in rows[1:]:
                ref = ref + x.double() if op == 'SUM' else torch.maximum(ref, x.double())
            x = rows[r].cuda()
            y = torch.full_like(x, float('nan'))
            label = f'Allreduce bf16 {op} count={count} n={n}'
            try:
                world.Allreduce(x, y, getattr(MPI, op))
                got = y.double().cpu()
                err = ((got - ref).abs() / ref.abs().clamp(min=1)).max().item()
                record(label, err < 1e-2 * n, f'max rel err {err}')
                d = hashlib.sha1(y.view(torch.int16).cpu().numpy().tobytes()).hexdigest()
                if len(set(world.allgather(d))) > 1:
                    record(label, False, 'results differ between ranks')
            except Exception:
                record(label, False, traceback.format_exc())
                world.allgather(None)


def test_split_warps(world):
    """The direct kernel with its stages on separate warps, many steps per channel (split_steps 1,
    2 channels; fixed when the team is set up, so on a communicator of its own)."""
    with settings(split_steps=1, nchannels=2):
        split = world.Dup()
        sweep(split, ['oneshot', 'twoshot'])
        gc.free(split)
