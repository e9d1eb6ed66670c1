// kernel_table.cu: the instantiations of the kernels (direct, LL, LL128, ring), one per (storage
// type, operator) that the contract needs (dispatch.cuh lists them).
#include "kernel_table.cuh"

namespace mg {

template <typename T, typename Op> static LL128KernelFn ll128_of() {
  if constexpr (sizeof(T) <= 8) return (LL128KernelFn)ll128_kernel<T, Op>;
  else return nullptr;
}

template <typename T, typename Op> static KernelChoice K(int mult = 1) {
  return KernelChoice{(KernelFn)direct_kernel<T, Op>, (LLKernelFn)ll_kernel<T, Op>, ll128_of<T, Op>(), (int)sizeof(T),
                      mult, (RingKernelFn)ring_kernel<T, Op>, (int)sizeof(typename PartOf<T>::type)};
}

// The pairs and their storage types are listed once, in dispatch.cuh.
KernelChoice reduce_kernel(int dtype, int op) {
  KernelChoice k{};
  visit_reduce(dtype, op, [&](auto t, auto o, int mult) {
    k = K<typename decltype(t)::type, typename decltype(o)::type>(mult);
  });
  return k;
}

KernelChoice copy_kernel(int dtype) {
  KernelChoice k{};
  visit_copy(dtype, [&](auto t, auto o, int mult) { k = K<typename decltype(t)::type, typename decltype(o)::type>(mult); });
  return k;
}

}  // namespace mg
