// runtime.cu: thin C wrappers over the CUDA runtime for the Cython layer (cudart is linked
// statically and finds the driver at run time, so importing mpigpu works on a machine without one).
#include <cuda_runtime.h>
#include "driver_api.cuh"
#include "mpigpu_cuda.h"
#include "status.cuh"

extern "C" {

const char *mg_error_string(int err) {
  switch (err) {
    case MG_OK: return "no error";
    case MG_ERR_UNSUPPORTED: return "type/op pair not implemented by the device engine";
    case MG_ERR_ARG: return "invalid argument";
    case MG_ERR_TEAM: return "device team incomplete: a peer workspace is not mapped";
    case MG_ERR_NOMEM: return "out of host memory";
    case MG_ERR_BUSY: return "too many GPU requests outstanding (complete some with Wait or Test)";
    case MG_ERR_MPI: return "MPI_Grequest_start failed";
    case MG_ERR_THREAD: return "the request completion thread could not start";
    case MG_ERR_TIMEOUT: return "a peer did not arrive within MPIGPU_TIMEOUT_S (the kernel stopped waiting)";
    case MG_ERR_ABORTED: return "the device team was aborted";
    case MG_ERR_BROKEN: return "the device team is broken by an earlier fault or abort";
    case MG_ERR_DECLINED: return "the call was declined at its gate (its ranks agreed on another path)";
    default: return err > 0 ? cudaGetErrorString((cudaError_t)err) : "unknown mpigpu error";
  }
}

int mg_device_count(int *count) {
  *count = 0;
  return rc(cudaGetDeviceCount(count));
}
int mg_get_device(int *device) { return rc(cudaGetDevice(device)); }
int mg_set_device(int device) { return rc(cudaSetDevice(device)); }

int mg_pointer_info(uintptr_t ptr, int *memtype, int *device) {
  cudaPointerAttributes at;
  cudaError_t e = cudaPointerGetAttributes(&at, (const void *)ptr);
  if (e != cudaSuccess) {
    *memtype = 0;
    *device = -1;
    return rc(e);
  }
  *memtype = (int)at.type;
  *device = at.device;
  return 0;
}

int mg_pointer_kind(uintptr_t ptr, int *kind, int *device) {
  *kind = MG_MEMORY_HOST;
  *device = -1;
  mg::PointerGetAttributes fn = mg::pointer_get_attributes();
  if (!fn || !ptr) return 0;
  CUpointer_attribute attrs[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  unsigned int type = 0;
  int managed = 0, ordinal = -1;
  void *data[3] = {&type, &managed, &ordinal};
  // Not a CUDA pointer (plain host memory): success, with the attributes left at their null values.
  if (fn(3, attrs, data, (CUdeviceptr)ptr) != CUDA_SUCCESS) return 0;
  if (managed) *kind = MG_MEMORY_MANAGED;
  else if (type == CU_MEMORYTYPE_DEVICE) *kind = MG_MEMORY_DEVICE;
  *device = *kind == MG_MEMORY_HOST ? -1 : ordinal;
  return 0;
}

int mg_pci_bus_id(int device, char *buf, int len) { return rc(cudaDeviceGetPCIBusId(buf, len, device)); }
int mg_device_by_pci_bus_id(const char *bus_id, int *device) { return rc(cudaDeviceGetByPCIBusId(device, bus_id)); }
int mg_can_access_peer(int device, int peer, int *can) { return rc(cudaDeviceCanAccessPeer(can, device, peer)); }

int mg_device_alloc(size_t bytes, uintptr_t *ptr) {
  void *p = nullptr;
  int e = rc(cudaMalloc(&p, bytes ? bytes : 1));
  *ptr = (uintptr_t)p;
  return e;
}
int mg_device_free(uintptr_t ptr) { return ptr ? rc(cudaFree((void *)ptr)) : 0; }
int mg_host_alloc(size_t bytes, uintptr_t *ptr) {
  void *p = nullptr;
  // mapped: kernels read and write it at its host address (the datatype kernels pack into it, _p2p.pxi)
  int e = rc(cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped));
  *ptr = (uintptr_t)p;
  return e;
}
int mg_host_free(uintptr_t ptr) { return rc(cudaFreeHost((void *)ptr)); }

int mg_stream_create(uintptr_t *stream) {
  cudaStream_t s = nullptr;
  int e = rc(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  *stream = (uintptr_t)s;
  return e;
}
int mg_stream_destroy(uintptr_t stream) { return rc(cudaStreamDestroy((cudaStream_t)stream)); }
int mg_stream_sync(uintptr_t stream) { return rc(cudaStreamSynchronize((cudaStream_t)stream)); }
int mg_stream_idle(uintptr_t stream, int *idle) {
  const cudaError_t e = cudaStreamQuery((cudaStream_t)stream);
  *idle = e == cudaSuccess;
  if (e == cudaSuccess) return 0;
  cudaGetLastError();  // returned here, not left for a later launch's check to find
  return e == cudaErrorNotReady ? 0 : rc(e);
}
int mg_event_create(uintptr_t *event) {
  cudaEvent_t ev = nullptr;
  int e = rc(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  *event = (uintptr_t)ev;
  return e;
}
int mg_event_destroy(uintptr_t event) { return rc(cudaEventDestroy((cudaEvent_t)event)); }
int mg_event_record(uintptr_t event, uintptr_t stream) {
  return rc(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream));
}
int mg_event_sync(uintptr_t event) { return rc(cudaEventSynchronize((cudaEvent_t)event)); }
int mg_stream_wait_event(uintptr_t stream, uintptr_t event) {
  return rc(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0));
}
int mg_memcpy_async(uintptr_t dst, uintptr_t src, size_t bytes, uintptr_t stream) {
  if (bytes == 0) return 0;
  return rc(cudaMemcpyAsync((void *)dst, (const void *)src, bytes, cudaMemcpyDefault, (cudaStream_t)stream));
}

}  // extern "C"
