// kernels_ll128.cu: the instantiations of the direct algorithm of line_kernel.cuh over the LL128
// protocol (ll128_proto.cuh), one per (storage type, operator) of the contract (kernel_table.cuh says
// why each family has a unit of its own).
#include "kernel_table.cuh"

namespace mg {

// 16-byte storage types (complex128 products) have none: a line's flag thread carries 8 bytes of
// data, which must hold whole elements.
LineKernelFn ll128_kernel_for(int dtype, int op, bool copy) {
  return instantiation_for<LineKernelFn>(dtype, op, copy, [](auto t, auto o) {
    using T = typename decltype(t)::type;
    if constexpr (sizeof(T) <= 8) return (LineKernelFn)line_kernel<LL128Proto, T, typename decltype(o)::type>;
    else return (LineKernelFn) nullptr;
  });
}

}  // namespace mg
