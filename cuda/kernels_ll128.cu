// kernels_ll128.cu: the instantiations of the LL128 kernel (ll128_kernel.cuh), one per (storage type,
// operator) of the contract (kernel_table.cuh says why each family has a unit of its own).
#include "kernel_table.cuh"

namespace mg {

// 16-byte storage types (complex128 products) have none: a line's flag thread carries 8 bytes of
// data, which must hold whole elements.
LL128KernelFn ll128_kernel_for(int dtype, int op, bool copy) {
  return instantiation_for<LL128KernelFn>(dtype, op, copy, [](auto t, auto o) {
    using T = typename decltype(t)::type;
    if constexpr (sizeof(T) <= 8) return (LL128KernelFn)ll128_kernel<T, typename decltype(o)::type>;
    else return (LL128KernelFn) nullptr;
  });
}

}  // namespace mg
