// kernels_ring.cu: the instantiations of the ring and chain kernel (ring_kernel.cuh), one per (storage type,
// operator) of the contract (kernel_table.cuh says why each family has a unit of its own).
#include "kernel_table.cuh"

namespace mg {

RingKernelFn ring_kernel_for(int dtype, int op, bool copy) {
  return instantiation_for<RingKernelFn>(dtype, op, copy, [](auto t, auto o) {
    return (RingKernelFn)ring_kernel<typename decltype(t)::type, typename decltype(o)::type>;
  });
}

}  // namespace mg
