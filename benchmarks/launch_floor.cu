// launch_floor.cu: what one blocking GPU call costs on this host before any data moves.
//
// A blocking collective is at least one kernel launch and one wait for it. This measures that floor
// with kernels that do nothing, from C (no Python), on one GPU, so the small-message rows of the
// benchmark can be read against it:
//   launch+sync      empty kernel, cudaLaunchKernel + cudaStreamSynchronize, per call
//   host-flag        the kernel's last block writes a flag into mapped host memory and the host
//                    spins on it instead of synchronizing (what a library could do instead)
//   512 B params     launch+sync of a kernel taking 512 bytes of __grid_constant__ arguments
//   launch only      back-to-back launches without a wait (the host-side cost of one launch)
// Each on a created non-blocking stream and on the legacy default stream (CuPy's default).
//
//   nvcc -std=c++17 -O2 -arch=sm_90 benchmarks/launch_floor.cu -o launch_floor && ./launch_floor
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                        \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

struct Params { unsigned char bytes[512]; };

__global__ void empty_kernel() {}

// Reads one parameter byte so the argument block cannot be dropped.
__global__ void params_kernel(const __grid_constant__ Params p, int *sink) {
  if (threadIdx.x == 0 && blockIdx.x == 0 && p.bytes[511] == 255) *sink = 1;
}

// Every block arrives; the last writes `value` to host memory after a system-scope fence.
__global__ void flag_kernel(volatile unsigned *host_flag, unsigned *arrived, unsigned value) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(arrived, 1u) == gridDim.x - 1) {
      *arrived = 0;
      __threadfence_system();
      *host_flag = value;
    }
  }
}

static double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char **argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 20000;
  const int blocks = 128, threads = 256;  // the engine's widest grid shape
  cudaStream_t created;
  CHECK(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking));
  unsigned *host_flag, *host_flag_dev, *arrived;
  int *sink;
  CHECK(cudaHostAlloc(&host_flag, sizeof(unsigned), cudaHostAllocMapped));
  CHECK(cudaHostGetDevicePointer(&host_flag_dev, host_flag, 0));
  CHECK(cudaMalloc(&arrived, sizeof(unsigned)));
  CHECK(cudaMalloc(&sink, sizeof(int)));
  CHECK(cudaMemset(arrived, 0, sizeof(unsigned)));
  *host_flag = 0;
  Params params = {};
  unsigned value = 0;

  std::printf("%-22s %12s %12s %12s %12s\n", "us per call", "launch+sync", "host-flag", "512 B params", "launch only");
  for (int pass = 0; pass < 2; ++pass) {  // the first pass warms up; both are printed
    for (cudaStream_t s : {created, (cudaStream_t)0}) {
      double t0 = now_us();
      for (int i = 0; i < iters; ++i) {
        empty_kernel<<<blocks, threads, 0, s>>>();
        CHECK(cudaStreamSynchronize(s));
      }
      double t1 = now_us();
      for (int i = 0; i < iters; ++i) {
        flag_kernel<<<blocks, threads, 0, s>>>(host_flag_dev, arrived, ++value);
        while (*(volatile unsigned *)host_flag != value) {
        }
      }
      CHECK(cudaStreamSynchronize(s));
      double t2 = now_us();
      for (int i = 0; i < iters; ++i) {
        params_kernel<<<blocks, threads, 0, s>>>(params, sink);
        CHECK(cudaStreamSynchronize(s));
      }
      double t3 = now_us();
      for (int i = 0; i < iters; ++i) empty_kernel<<<blocks, threads, 0, s>>>();
      CHECK(cudaStreamSynchronize(s));
      double t4 = now_us();
      CHECK(cudaGetLastError());
      std::printf("%-22s %12.2f %12.2f %12.2f %12.2f\n", s ? "created stream" : "legacy default stream",
                  (t1 - t0) / iters, (t2 - t1) / iters, (t3 - t2) / iters, (t4 - t3) / iters);
    }
  }
  return 0;
}
