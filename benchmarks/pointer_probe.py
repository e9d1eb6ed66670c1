"""What the CUDA driver says of a few kinds of memory in one cuPointerGetAttributes question (the
interposer's question, pmpi/memory.c): memory type, managed, device ordinal. On hosts whose driver lets
GPUs reach pageable memory (HMM), plain malloc'd memory must still read as host memory.

    python benchmarks/pointer_probe.py
"""
import ctypes

import numpy as np

cuda = ctypes.CDLL('libcuda.so.1')
cuda.cuInit(0)
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
cuda.cuDeviceGet(ctypes.byref(dev), 0)
cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
cuda.cuCtxSetCurrent(ctx)
MEMORY_TYPE, IS_MANAGED, DEVICE_ORDINAL = 2, 8, 9  # CUpointer_attribute


def ask(ptr):
    kind, managed, ordinal = ctypes.c_uint(0), ctypes.c_int(0), ctypes.c_int(-1)
    attrs = (ctypes.c_int * 3)(MEMORY_TYPE, IS_MANAGED, DEVICE_ORDINAL)
    data = (ctypes.c_void_p * 3)(ctypes.addressof(kind), ctypes.addressof(managed), ctypes.addressof(ordinal))
    rc = cuda.cuPointerGetAttributes(3, attrs, data, ctypes.c_uint64(ptr))
    return f'rc {rc}, memory type {kind.value}, managed {managed.value}, ordinal {ordinal.value}'


libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
small, big = libc.malloc(1024), libc.malloc(64 << 20)
arr = np.ones(1 << 20, np.float32)
pinned, device, managed = ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_uint64()
cuda.cuMemAllocHost_v2(ctypes.byref(pinned), 1024)
cuda.cuMemAlloc_v2(ctypes.byref(device), 1024)
cuda.cuMemAllocManaged(ctypes.byref(managed), 1024, 1)
for name, ptr in [('malloc 1 KB', small), ('malloc 64 MB', big), ('numpy 4 MB', arr.ctypes.data),
                  ('cuMemAllocHost', pinned.value), ('cuMemAlloc', device.value), ('cuMemAllocManaged', managed.value)]:
    print(f'{name}: {ask(ptr)}')
