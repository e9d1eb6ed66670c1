// driver_api.cuh: the CUDA driver's functions that the runtime does not wrap, found once through the
// runtime (cudart is linked statically and finds the driver at run time, so nothing here links
// libcuda; without a driver the lookup fails and callers answer as if no pointer were device memory,
// or wait as they would without the function).
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

namespace mg {

// The driver's function `name` as of the CUDA 12.0 ABI, or nullptr where the driver has none.
inline void *driver_entry(const char *name) {
  void *p = nullptr;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
      q == cudaDriverEntryPointSuccess)
    return p;
  cudaGetLastError();
  return nullptr;
}

typedef CUresult (*PointerGetAttributes)(unsigned, CUpointer_attribute *, void **, CUdeviceptr);

// The driver's cuPointerGetAttributes, or nullptr. It needs no context: asking where a host program's
// pointer lives does not create one.
inline PointerGetAttributes pointer_get_attributes() {
  static const PointerGetAttributes fn = (PointerGetAttributes)driver_entry("cuPointerGetAttributes");
  return fn;
}

typedef CUresult (*StreamWriteValue32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

// The driver's cuStreamWriteValue32 (a stream's write of a word, after the work queued before it), or
// nullptr.
inline StreamWriteValue32 stream_write_value32() {
  static const StreamWriteValue32 fn = (StreamWriteValue32)driver_entry("cuStreamWriteValue32");
  return fn;
}

}  // namespace mg
