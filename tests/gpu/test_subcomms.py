"""Sub-communicators from Split: odd and even ranks (the automatic choice and the ring forms), and
the halves with no resident kernel (the launched LL and LL128 kernels on blocking calls), each swept
like COMM_WORLD. `mpirun -n N python -m pytest -p no:cacheprovider tests/gpu/test_subcomms.py`."""
import gpucheck as gc
import mpigpu
from gpucheck import RANK, SIZE, record, settings, sweep


def split_sweep(world, color, algos):
    sub = world.Split(color, RANK)
    record('Split gives an mpigpu.Intracomm', isinstance(sub, mpigpu.Intracomm), type(sub).__name__)
    sweep(sub, algos)
    gc.free(sub)


def test_odd_even(world):
    split_sweep(world, RANK % 2, ['auto', 'ring'])


def test_halves_without_resident_kernel(world):
    with settings(resident_us=0):
        split_sweep(world, int(RANK < SIZE // 2), ['auto'])
