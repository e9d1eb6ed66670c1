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
// Then a resident kernel, launched once and polling for work, against the same floor:
//   host doorbell    the host stores a call number into mapped host memory, every block of the
//                    resident kernel polls it, the last block to see it writes it back into mapped
//                    host memory and the host spins on that (no launch, no synchronize)
//   stream write     the same, but the number reaches device memory through cuStreamWriteValue32 on
//                    the caller's stream, so it is ordered after the work already queued there
//   stream query     cudaStreamQuery on an idle stream (the check a host doorbell needs first); then
//                    the driver's cuStreamQuery, and both on the legacy default stream
//
//   nvcc -std=c++17 -O2 -arch=sm_90 benchmarks/launch_floor.cu -o launch_floor && ./launch_floor
#include <cuda.h>
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

// Polls *bell (host or device memory) for call numbers until it reads ~0u; after each call the
// last block to arrive stores the number into *host_done (mapped host memory).
__global__ void resident_kernel(const unsigned *bell, unsigned *host_done, unsigned *arrived) {
  __shared__ unsigned call;
  unsigned last = 0;
  for (;;) {
    if (threadIdx.x == 0) {
      unsigned v;
      do {
        asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(bell) : "memory");
      } while (v == last);
      call = v;
    }
    __syncthreads();
    last = call;
    if (last == ~0u) return;
    if (threadIdx.x == 0) {
      __threadfence();
      if (atomicAdd(arrived, 1u) == gridDim.x - 1) {
        *arrived = 0;
        __threadfence_system();
        *(volatile unsigned *)host_done = last;
      }
    }
    __syncthreads();
  }
}

typedef CUresult (*WriteValue32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*StreamQuery)(CUstream);

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

  // The resident kernel: one call per doorbell, on a created stream of its own.
  WriteValue32 write_value = nullptr;
  cudaDriverEntryPointQueryResult found;
  CHECK(cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", (void **)&write_value, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || !write_value) {
    std::fprintf(stderr, "cuStreamWriteValue32 not found\n");
    return 1;
  }
  cudaStream_t resident;
  CHECK(cudaStreamCreateWithFlags(&resident, cudaStreamNonBlocking));
  unsigned *host_bell, *host_bell_dev, *dev_bell, *host_done, *host_done_dev;
  CHECK(cudaHostAlloc(&host_bell, sizeof(unsigned), cudaHostAllocMapped));
  CHECK(cudaHostGetDevicePointer(&host_bell_dev, host_bell, 0));
  CHECK(cudaHostAlloc(&host_done, sizeof(unsigned), cudaHostAllocMapped));
  CHECK(cudaHostGetDevicePointer(&host_done_dev, host_done, 0));
  CHECK(cudaMalloc(&dev_bell, sizeof(unsigned)));
  StreamQuery cu_query = nullptr;
  CHECK(cudaGetDriverEntryPointByVersion("cuStreamQuery", (void **)&cu_query, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || !cu_query) {
    std::fprintf(stderr, "cuStreamQuery not found\n");
    return 1;
  }
  std::printf("\n%-22s %12s %12s %12s\n", "resident, us per call", "host doorbell", "stream write", "stream query");
  for (int pass = 0; pass < 2; ++pass) {
    for (int nblocks : {1, 8}) {
      double cell[2];
      for (int mode = 0; mode < 2; ++mode) {
        *host_bell = 0;
        *host_done = 0;
        CHECK(cudaMemset(dev_bell, 0, sizeof(unsigned)));
        CHECK(cudaDeviceSynchronize());
        resident_kernel<<<nblocks, threads, 0, resident>>>(mode ? dev_bell : host_bell_dev, host_done_dev, arrived);
        CHECK(cudaGetLastError());
        double t0 = now_us();
        for (unsigned v = 1; v <= (unsigned)iters; ++v) {
          if (mode) {
            if (write_value((CUstream)created, (CUdeviceptr)dev_bell, v, 0) != CUDA_SUCCESS) return 1;
          } else {
            *(volatile unsigned *)host_bell = v;
          }
          while (*(volatile unsigned *)host_done != v) {
          }
        }
        cell[mode] = (now_us() - t0) / iters;
        if (mode) {
          if (write_value((CUstream)created, (CUdeviceptr)dev_bell, ~0u, 0) != CUDA_SUCCESS) return 1;
        } else {
          *(volatile unsigned *)host_bell = ~0u;
        }
        CHECK(cudaStreamSynchronize(resident));
        CHECK(cudaStreamSynchronize(created));
      }
      double t0 = now_us();
      for (int i = 0; i < iters; ++i)
        if (cudaStreamQuery(created) != cudaSuccess) return 1;
      double query = (now_us() - t0) / iters;
      std::printf("%-22s %12.2f %12.2f %12.2f\n", nblocks == 1 ? "1 block" : "8 blocks", cell[0], cell[1], query);
    }
  }
  std::printf("\n%-22s %12s %12s\n", "query, us per call", "cudaStream", "cuStream");
  for (cudaStream_t s : {created, (cudaStream_t)0, cudaStreamLegacy}) {
    double t0 = now_us();
    for (int i = 0; i < iters; ++i)
      if (cudaStreamQuery(s) != cudaSuccess) return 1;
    double t1 = now_us();
    for (int i = 0; i < iters; ++i)
      if (cu_query((CUstream)s) != CUDA_SUCCESS) return 1;
    double t2 = now_us();
    std::printf("%-22s %12.2f %12.2f\n", s == created ? "created stream" : s ? "cudaStreamLegacy" : "stream 0",
                (t1 - t0) / iters, (t2 - t1) / iters);
  }
  return 0;
}
