// kernel_table.cu: the kernels of a (dtype, op) pair, one of each family (their instantiations are
// in kernels_*.cu), and the pair's storage geometry.
#include "kernel_table.cuh"

namespace mg {

// The pairs and their storage types are listed once, in dispatch.cuh.
static KernelChoice choice(int dtype, int op, bool copy) {
  KernelChoice k{};
  auto geometry = [&](auto t, auto, int mult) {
    using T = typename decltype(t)::type;
    k.elem_size = (int)sizeof(T);
    k.mult = mult;
    k.part_size = (int)sizeof(typename PartOf<T>::type);
  };
  if (!(copy ? visit_copy(dtype, geometry) : visit_reduce(dtype, op, geometry))) return k;
  k.fn = direct_kernel_for(dtype, op, copy);
  k.ll = ll_kernel_for(dtype, op, copy);
  k.ll128 = ll128_kernel_for(dtype, op, copy);
  k.ring = ring_kernel_for(dtype, op, copy);
  return k;
}

KernelChoice reduce_kernel(int dtype, int op) { return choice(dtype, op, false); }

KernelChoice copy_kernel(int dtype) { return choice(dtype, 0, true); }

}  // namespace mg
