// ipc_buffers.cu: user buffers shared over CUDA IPC, for point-to-point between GPUs of one node.
//
// A sender describes its buffer's allocation (base, size, a process-wide unique id) and exports it
// once; the receiver opens it once per allocation and copies straight out of the sender's memory over
// NVLink. The callers cache both sides by allocation id, so a steady stream of messages from reused
// buffers (every caching allocator) opens nothing per message.
#include <cuda.h>
#include <cuda_runtime.h>
#include <string.h>

#include "driver_api.cuh"
#include "mpigpu_cuda.h"
#include "status.cuh"

extern "C" {

int mg_ipc_describe(uintptr_t ptr, uintptr_t *base, size_t *size, uint64_t *buffer_id, int *ipc_capable) {
  *base = 0;
  *size = 0;
  *buffer_id = 0;
  *ipc_capable = 0;
  mg::PointerGetAttributes fn = mg::pointer_get_attributes();
  if (!fn) return MG_ERR_UNSUPPORTED;
  CUpointer_attribute attrs[4] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                  CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                  CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE};
  CUdeviceptr start = 0;
  size_t bytes = 0;
  unsigned long long id = 0;
  int capable = 0;
  void *data[4] = {&start, &bytes, &id, &capable};
  if (fn(4, attrs, data, (CUdeviceptr)ptr) != CUDA_SUCCESS) return MG_ERR_ARG;
  *base = (uintptr_t)start;
  *size = bytes;
  *buffer_id = id;
  *ipc_capable = capable;
  return 0;
}

int mg_ipc_export(uintptr_t base, void *handle) {
  cudaIpcMemHandle_t h;
  int e = rc(cudaIpcGetMemHandle(&h, (void *)base));
  if (!e) memcpy(handle, &h, sizeof h);
  return e;
}

int mg_ipc_open(const void *handle, uintptr_t *base) {
  cudaIpcMemHandle_t h;
  memcpy(&h, handle, sizeof h);
  void *p = nullptr;
  int e = rc(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
  *base = (uintptr_t)p;
  return e;
}

int mg_ipc_close(uintptr_t base) { return rc(cudaIpcCloseMemHandle((void *)base)); }

}  // extern "C"
