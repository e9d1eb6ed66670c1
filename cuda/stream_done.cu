// stream_done.cu: the blocking wait for a launched call. After the launch the stream writes the call's
// number into a word of mapped host memory (the driver's cuStreamWriteValue32) and the host spins on
// that word, where a synchronize would return 0.6-1.1 us later: enough to put a one-rank 128-512 MB
// copy level with NCCL's instead of 0.99x (docs/benchmarks.md, one rank).
#include <cuda.h>
#include <cuda_runtime.h>
#include "team.cuh"
#include "status.cuh"
#include "driver_api.cuh"
#include "host_spin.cuh"

// The wait without the word (no driver entry, or its write failed): a stream with nothing left to run
// answers a query sooner than a synchronize returns; a busy one is synchronized, the query's time then
// hidden behind the GPU's work.
static int stream_wait(uintptr_t stream) {
  int idle = 0;
  const int e = mg_stream_idle(stream, &idle);
  return e || idle ? e : mg_stream_sync(stream);
}

int stream_done_open(mg_team *t) {
  t->done_word = t->done_word_dev = nullptr;
  if (!mg::stream_write_value32()) return 0;  // no driver entry: waits synchronize
  void *word = nullptr, *dev = nullptr;
  int e = rc(cudaHostAlloc(&word, sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable));
  if (e) return e;
  *(volatile uint32_t *)word = 0;
  e = rc(cudaHostGetDevicePointer(&dev, word, 0));
  if (e) {
    cudaFreeHost(word);
    return e;
  }
  t->done_word = (uint32_t *)word;
  t->done_word_dev = (uint32_t *)dev;
  t->done_seq = 0;
  return 0;
}

void stream_done_close(mg_team *t) {
  if (t->done_word) cudaFreeHost(t->done_word);
  t->done_word = t->done_word_dev = nullptr;
}

int stream_done_wait(mg_team *t, uintptr_t stream) {
  if (!t->done_word) return stream_wait(stream);
  const uint32_t seq = t->done_seq + 1;
  if (mg::stream_write_value32()((CUstream)stream, (CUdeviceptr)t->done_word_dev, seq, 0) != CUDA_SUCCESS)
    return stream_wait(stream);  // the plain wait reports what is wrong with the stream
  t->done_seq = seq;
  for (unsigned spins = 1;; ++spins) {
    if (*(const volatile uint32_t *)t->done_word == seq) return 0;
    if ((spins & 0x3fffu) == 0) {
      // A kernel that failed (a CUDA error) never lets the write run, nor does a stream being captured
      // (the write went into the graph): the query reports either. A stream with nothing left to run
      // has run the call, whatever the word says.
      const cudaError_t q = cudaStreamQuery((cudaStream_t)stream);
      if (q != cudaErrorNotReady) return rc(q);
      cudaGetLastError();
    }
    cpu_relax();
  }
}
