// host_wait.cu: a stream that waits for the host. The hierarchical path's network phase runs on the host
// (MPI), so a stream= call enqueues a one-thread kernel that polls a word of pinned host memory until
// the progress thread writes the call's number there, after the call's result is in place: work
// queued on the stream after the call then runs after it, without the host blocking the caller.
#include <cuda_runtime.h>
#include "mpigpu_cuda.h"
#include "status.cuh"

namespace {

__device__ __forceinline__ uint32_t ld_acquire_sys_u32(const uint32_t *p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Waits until words[0] has reached `value` (compared as a wrapping 32-bit sequence). After timeout_ns
// (0: never) it stops waiting and writes `value` into words[1], so the host can tell that the stream
// went on without the result (no trap: a trap would poison the process's CUDA context).
__global__ void wait_host_word(uint32_t *words, uint32_t value, uint64_t timeout_ns) {
  const uint64_t start = now_ns();
  while ((int32_t)(ld_acquire_sys_u32(words) - value) < 0) {
    if (timeout_ns && now_ns() - start > timeout_ns) {
      *(volatile uint32_t *)(words + 1) = value;
      __threadfence_system();
      return;
    }
    __nanosleep(2000);
  }
}

}  // namespace

extern "C" {

int mg_stream_wait_host(uintptr_t stream, uintptr_t words, uint32_t value, double timeout_s) {
  if (!words) return MG_ERR_ARG;
  const uint64_t timeout_ns = timeout_s > 0 ? (uint64_t)(timeout_s * 1e9) : 0;
  wait_host_word<<<1, 1, 0, (cudaStream_t)stream>>>((uint32_t *)words, value, timeout_ns);
  return rc(cudaGetLastError());
}

int mg_wait_host_load(void) {
  cudaFuncAttributes attr;
  return rc(cudaFuncGetAttributes(&attr, (const void *)wait_host_word));
}

int mg_stream_capturing(uintptr_t stream, int *capturing) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  int e = rc(cudaStreamIsCapturing((cudaStream_t)stream, &status));
  *capturing = status != cudaStreamCaptureStatusNone;
  return e;
}

}  // extern "C"
