// driver_api.cuh: the CUDA driver's functions that the runtime does not wrap, found once through the
// runtime (cudart is linked statically and finds the driver at run time, so nothing here links
// libcuda; without a driver the lookup fails and callers answer as if no pointer were device memory).
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

namespace mg {

typedef CUresult (*PointerGetAttributes)(unsigned, CUpointer_attribute *, void **, CUdeviceptr);

// The driver's cuPointerGetAttributes, or nullptr where there is no driver. It needs no context: asking
// where a host program's pointer lives does not create one.
inline PointerGetAttributes pointer_get_attributes() {
  static PointerGetAttributes fn = nullptr;
  static bool tried = false;
  if (!tried) {
    void *p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &p, 12000, cudaEnableDefault, &q) ==
            cudaSuccess && q == cudaDriverEntryPointSuccess)
      fn = (PointerGetAttributes)p;
    else
      cudaGetLastError();
    tried = true;
  }
  return fn;
}

}  // namespace mg
