// kernels_direct.cu: the instantiations of the direct kernel (direct_kernel.cuh), one per (storage type,
// operator) of the contract (kernel_table.cuh says why each family has a unit of its own).
#include "kernel_table.cuh"

namespace mg {

KernelFn direct_kernel_for(int dtype, int op, bool copy) {
  return instantiation_for<KernelFn>(dtype, op, copy, [](auto t, auto o) {
    return (KernelFn)direct_kernel<typename decltype(t)::type, typename decltype(o)::type>;
  });
}

}  // namespace mg
