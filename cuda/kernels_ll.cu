// kernels_ll.cu: the instantiations of the LL kernel (ll_kernel.cuh), one per (storage type,
// operator) of the contract (kernel_table.cuh says why each family has a unit of its own).
#include "kernel_table.cuh"

namespace mg {

LLKernelFn ll_kernel_for(int dtype, int op, bool copy) {
  return instantiation_for<LLKernelFn>(dtype, op, copy, [](auto t, auto o) {
    return (LLKernelFn)ll_kernel<typename decltype(t)::type, typename decltype(o)::type>;
  });
}

}  // namespace mg
