"""The CUDA architectures of the GPUs this machine shows, for meson's `gpu_archs=auto`.

    python3 cuda/gpu_archs.py NVCC...   ->  e.g. "90" (one line, space separated, oldest first)

Asks the CUDA driver (libcuda, through ctypes: no toolkit, no nvidia-smi needed) for every visible
GPU's compute capability, then keeps what the given nvcc can compile: a GPU newer than nvcc's newest
architecture gets that one (its PTX runs there through the driver's JIT); one older than nvcc's oldest
is left out. Prints an empty line when no GPU is visible (no driver, no device, CUDA_VISIBLE_DEVICES
empty); meson then uses its documented default.
"""
import ctypes
import subprocess
import sys

# cuDeviceGetAttribute codes (cuda.h: CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR)
_CC_MAJOR, _CC_MINOR = 75, 76


def visible_capabilities():
    """Compute capabilities (e.g. 90 for 9.0) of the GPUs the driver shows; [] when there are none."""
    try:
        cuda = ctypes.CDLL('libcuda.so.1')
    except OSError:
        return []
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return []
    caps = set()
    for ordinal in range(count.value):
        dev, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        if (cuda.cuDeviceGet(ctypes.byref(dev), ordinal) == 0
                and cuda.cuDeviceGetAttribute(ctypes.byref(major), _CC_MAJOR, dev) == 0
                and cuda.cuDeviceGetAttribute(ctypes.byref(minor), _CC_MINOR, dev) == 0):
            caps.add(major.value * 10 + minor.value)
    return sorted(caps)


def nvcc_architectures(nvcc):
    """The virtual architectures nvcc compiles for (`--list-gpu-arch`), as numbers; [] if it cannot say."""
    try:
        out = subprocess.run([*nvcc, '--list-gpu-arch'], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return sorted(int(w[len('compute_'):]) for w in out.split() if w[len('compute_'):].isdigit())


def choose(caps, supported):
    """Each capability, or nvcc's newest below it when nvcc does not know it; none older than nvcc's oldest."""
    if not supported:
        return caps
    out = set()
    for cap in caps:
        fits = [a for a in supported if a <= cap]
        if fits:
            out.add(cap if cap in supported else fits[-1])
    return sorted(out)


if __name__ == '__main__':
    print(' '.join(str(a) for a in choose(visible_capabilities(), nvcc_architectures(sys.argv[1:]))))
