// kernel_table.cuh: which instantiations of the kernels run a (dtype, op) pair, and how many
// storage elements one user element is (complex SUM runs as a float SUM over twice the count).
#pragma once
#include "direct_kernel.cuh"
#include "dispatch.cuh"
#include "line_kernel.cuh"
#include "ring_kernel.cuh"

namespace mg {

using KernelFn = void (*)(DirectArgs);
using LineKernelFn = void (*)(LineArgs);  // either line protocol (line_kernel.cuh)
using RingKernelFn = void (*)(RingArgs);

struct KernelChoice {
  KernelFn fn;
  LineKernelFn ll;     // the same (type, op) in the low-latency protocol
  LineKernelFn ll128;  // in the 128-byte-line protocol; nullptr for 16-byte types (a line's flag
                        // thread carries 8 bytes of data, which must hold whole elements)
  int elem_size;  // bytes of the storage type the kernel moves
  int mult;       // storage elements per user element
  RingKernelFn ring;  // the ring and chain forms
  int part_size;      // bytes per element of a partial result in the ring's slots (PartOf)
};

KernelChoice reduce_kernel(int dtype, int op);  // fn == nullptr: pair not implemented
KernelChoice copy_kernel(int dtype);

// Each kernel family's instantiations live in a translation unit of their own (kernels_direct.cu,
// kernels_ll.cu, kernels_ll128.cu, kernels_ring.cu), so the build compiles them in parallel (build
// times in docs/architecture.md, "Build"). Each returns its family's kernel for a reduction (copy
// false) or a copy (copy true) of dtype, nullptr where there is none.
KernelFn direct_kernel_for(int dtype, int op, bool copy);
LineKernelFn ll_kernel_for(int dtype, int op, bool copy);
LineKernelFn ll128_kernel_for(int dtype, int op, bool copy);
RingKernelFn ring_kernel_for(int dtype, int op, bool copy);

// What those units share: of(Tag<T>, Tag<Op>) for the (storage type, operator) that runs the pair.
template <typename Fn, typename Of> Fn instantiation_for(int dtype, int op, bool copy, Of of) {
  Fn fn = nullptr;
  auto take = [&](auto t, auto o, int) { fn = of(t, o); };
  if (copy) visit_copy(dtype, take);
  else visit_reduce(dtype, op, take);
  return fn;
}

// The kernels of a collective: reductions combine with op, Bcast and Allgather copy.
inline KernelChoice kernels_for(int coll, int dtype, int op) {
  const bool reduces = coll == MG_ALLREDUCE || coll == MG_REDUCE || coll == MG_REDUCE_SCATTER_BLOCK;
  return reduces ? reduce_kernel(dtype, op) : copy_kernel(dtype);
}

}  // namespace mg
