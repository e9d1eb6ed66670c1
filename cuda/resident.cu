// resident.cu: the host side of the resident kernel (resident_kernel.cuh): its mailbox and stream,
// created with the team; launching an instance when none runs; ringing a call and spinning until it
// is done; stopping it when the team is released.
#include <cuda_runtime.h>
#include <string.h>
#include <time.h>
#include "team.cuh"
#include "status.cuh"
#include "resident_kernel.cuh"
#include "host_spin.cuh"

template <typename U> static inline U load(const U *p) { return *(const volatile U *)p; }

static inline uint64_t host_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// An instance waits twice the longest recent gap between the program's calls plus this much: the
// host's clock reads the gap from one call's return to the next call, the instance's from its end of
// the call to the next call's words arriving, about 2 us later (the mailbox round trip), and a
// Python loop's gaps jitter by a few microseconds.
constexpr uint64_t kLingerSlackNs = 10000;

int resident_open(mg_team *t) {
  mg_resident &r = t->res;
  memset(&r, 0, sizeof(r));
  if (t->cfg.resident_us <= 0) return 0;
  r.linger_ns = (uint64_t)(t->cfg.resident_us * 1e3);
  r.linger_us = (uint32_t)((r.linger_ns + kLingerSlackNs) / 1000);
  r.returned_ns = host_ns();  // the team is set up by its first call, which follows at once
  void *box = nullptr, *dev = nullptr;
  int e = rc(cudaHostAlloc(&box, sizeof(mg::ResidentBox), cudaHostAllocMapped | cudaHostAllocPortable));
  if (e) return e;
  memset(box, 0, sizeof(mg::ResidentBox));
  e = rc(cudaHostGetDevicePointer(&dev, box, 0));
  if (!e) e = rc(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking));
  if (e) {
    cudaFreeHost(box);
    return e;
  }
  r.box = (mg::ResidentBox *)box;
  r.box_dev = (mg::ResidentBox *)dev;
  return 0;
}

// Writes call `call` into the mailbox: every word carries the number, so their order does not matter.
// An exchange's table goes first: the blocks read it once they have the call.
static void ring(mg::ResidentBox *box, uint32_t call, const mg::ResidentCall &c, const uint32_t *table = nullptr) {
  if (table)
    for (int i = 0; i < mg::kTableWords; ++i) *(volatile uint64_t *)&box->table[i] = (uint64_t)call << 32 | table[i];
  for (int i = 0; i < mg::kCallWords; ++i)
    *(volatile uint64_t *)&box->call[i] = (uint64_t)call << 32 | mg::call_word(c, i);
}

static int launch_instance(mg_team *t) {
  mg_resident &r = t->res;
  mg::ResidentArgs a;
  memset(&a, 0, sizeof(a));
  for (int k = 0; k < t->cfg.nranks; ++k) a.team.ws[k] = t->ws[k];
  a.team.layout = t->layout;
  a.team.rank = t->cfg.rank;
  a.team.nranks = t->cfg.nranks;
  a.team.watch = mg::Watch{t->timeout_ns, t->fault_dev, nullptr};
  a.box = r.box_dev;
  a.start = r.call;
  a.epoch = ++r.epoch;
  a.linger_ns = r.linger_ns;
  a.channel_bytes = t->cfg.exchange_channel_bytes;
  a.ll_bytes = t->cfg.exchange_ll_bytes;
  void *params[] = {&a};
  // A one-rank team's instance only copies, in a kernel that takes half an SM's registers: one block
  // per SM, so its copies run at the memory's bandwidth (docs/benchmarks.md, one rank: 64 blocks took
  // a 32 MB copy to 0.95x NCCL's time, one per SM to 1.05-1.12x), and kernels launched beside it still fit.
  const bool copies = t->cfg.nranks == 1;
  const void *kernel = copies ? (const void *)mg::resident_copy_kernel : (const void *)mg::resident_kernel;
  const int blocks = copies && t->sm_count > 0 ? t->sm_count : t->cfg.resident_blocks;
  int e = rc(cudaLaunchKernel(kernel, dim3(blocks), dim3(mg::kThreads), params, 0, r.stream));
  if (e) return e;
  r.running = 1;
  ++r.launches;
  return 0;
}

// The instance has returned, or is returning (it wrote `exited`): wait for its end.
static int collect_instance(mg_team *t) {
  t->res.running = 0;
  return rc(cudaStreamSynchronize(t->res.stream));
}

// Whether a blocking call runs resident, and how long the instance waits after it. An instance pays
// off only while the program calls again soon: while it waits, its blocks hold MPIGPU_RESIDENT_BLOCKS
// SMs, so a kernel launched meanwhile runs on the others (on 2x H200 a 2048^3 float32 GEMM launched
// right after a 1 KB Allreduce took 527 us with 100 us of waiting, 418 with none), and a program's
// cudaDeviceSynchronize waits for it. So the gaps between the program's calls decide:
// - a call after a gap longer than linger_ns (MPIGPU_RESIDENT_US) is a call alone: it launches, and
//   no instance starts for it;
// - otherwise the instance waits after the call twice the longest recent gap, at most linger_ns, plus
//   kLingerSlackNs: long enough for the next call of a loop, not for the GPU work after its last one;
// - a call whose stream has work queued launches after that work, and ends a waiting instance, whose
//   SMs that work can then use.
int resident_ready(mg_team *t, uintptr_t stream) {
  mg_resident &r = t->res;
  if (!r.box) return 0;
  const uint64_t gap = host_ns() - r.returned_ns;
  if (gap > r.linger_ns) {
    r.gap_ns = 0;
    ++r.alone;
    return 0;
  }
  r.gap_ns = gap > r.gap_ns / 2 ? gap : r.gap_ns / 2;
  const uint64_t wait = 2 * r.gap_ns + kLingerSlackNs, most = r.linger_ns + kLingerSlackNs;
  r.linger_us = (uint32_t)((wait < most ? wait : most) / 1000);
  if (t->inflight) {  // a stream= or non-blocking call of this team may still run
    if (cudaEventQuery(t->done) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    t->inflight = 0;
  }
  int idle = 0;
  if (mg_stream_idle(stream, &idle) || !idle) {  // work queued before the call: launch after it
    resident_stop(t);
    return 0;
  }
  return 1;
}

void resident_returned(mg_team *t) { t->res.returned_ns = host_ns(); }

int resident_run(mg_team *t, const mg::ResidentCall &c, mg_gate_fn gate, void *ctx, const uint32_t *table) {
  mg_resident &r = t->res;
  int e;
  if (r.running && load(&r.box->exited) == r.epoch && (e = collect_instance(t))) return e;
  if (!r.running && (e = launch_instance(t))) return e;
  if (gate && gate(ctx)) return MG_ERR_DECLINED;  // an instance launched for it waits, then returns
  const uint32_t call = r.call + 1;
  mg::ResidentCall rung = c;
  rung.linger_us = r.linger_us;
  ring(r.box, call, rung, table);
  for (unsigned spins = 1;; ++spins) {
    if (load(&r.box->done) == call) break;
    bool ended = load(&r.box->exited) == r.epoch;
    if (!ended && (spins & 0x3fffu) == 0) {
      // A kernel that failed (a CUDA error) writes nothing: its stream reports the error. One whose
      // call stopped (a fault) writes `done`, like any other.
      cudaError_t q = cudaStreamQuery(r.stream);
      if (q != cudaErrorNotReady && q != cudaSuccess) return rc(q);
      cudaGetLastError();
      ended = q == cudaSuccess;
    }
    if (ended) {
      // The instance gave up waiting just as this call was rung: after its end, the next one takes it.
      if ((e = collect_instance(t))) return e;
      if (load(&r.box->done) == call) break;
      if ((e = launch_instance(t))) return e;
      continue;
    }
    cpu_relax();
  }
  r.call = call;
  ++r.calls;
  return 0;
}

int resident_stop(mg_team *t) {
  mg_resident &r = t->res;
  if (!r.running) return 0;
  if (load(&r.box->exited) != r.epoch) {
    // The exit takes a call number of its own: an instance that misses it (it idles out first) can
    // never take the next call for it.
    mg::ResidentCall c{};
    c.kind = mg::kResidentExit;
    ring(r.box, ++r.call, c);
  }
  r.running = 0;  // a next instance queues behind this one on r.stream
  return 0;
}

int resident_close(mg_team *t) {
  mg_resident &r = t->res;
  if (!r.box) return 0;
  resident_stop(t);
  int e = rc(cudaStreamSynchronize(r.stream));  // also an instance told to stop before
  cudaError_t s = cudaStreamDestroy(r.stream);
  if (!e) e = rc(s);
  s = cudaFreeHost(r.box);
  if (!e) e = rc(s);
  r.box = r.box_dev = nullptr;
  return e;
}

extern "C" void mg_team_resident_stats(const mg_team *t, uint64_t *calls, uint64_t *launches, uint64_t *alone) {
  *calls = t->res.calls;
  *launches = t->res.launches;
  *alone = t->res.alone;
}
