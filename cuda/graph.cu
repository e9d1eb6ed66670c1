// graph.cu: calls recorded once and replayed. A hierarchical call over a transport of device memory is
// a fixed sequence of enqueued work (node kernels, network sends and receives, reductions) on a few
// streams; recorded as a CUDA graph, each later identical call is one launch instead of dozens of
// host calls (docs/architecture.md, "Replayed calls").
#include <cuda_runtime.h>
#include "mpigpu_cuda.h"
#include "status.cuh"

extern "C" {

int mg_capture_begin(uintptr_t stream) {
  return rc(cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeRelaxed));
}

int mg_capture_end(uintptr_t stream, uintptr_t *graph) {
  *graph = 0;
  cudaGraph_t g = nullptr;
  int e = rc(cudaStreamEndCapture((cudaStream_t)stream, &g));
  if (e) {
    if (g) cudaGraphDestroy(g);
    return e;
  }
  cudaGraphExec_t exec = nullptr;
  e = rc(cudaGraphInstantiateWithFlags(&exec, g, 0));
  cudaGraphDestroy(g);  // the executable graph keeps what it needs
  if (e) return e;
  *graph = (uintptr_t)exec;
  return 0;
}

int mg_graph_launch(uintptr_t graph, uintptr_t stream) {
  if (!graph) return MG_ERR_ARG;
  return rc(cudaGraphLaunch((cudaGraphExec_t)graph, (cudaStream_t)stream));
}

int mg_graph_destroy(uintptr_t graph) {
  if (!graph) return 0;
  return rc(cudaGraphExecDestroy((cudaGraphExec_t)graph));
}

}  // extern "C"
