// kernels_ll.cu: the instantiations of the direct algorithm of line_kernel.cuh over the LL protocol
// (ll_proto.cuh), one per (storage type, operator) of the contract (kernel_table.cuh says why each
// family has a unit of its own).
#include "kernel_table.cuh"

namespace mg {

LineKernelFn ll_kernel_for(int dtype, int op, bool copy) {
  return instantiation_for<LineKernelFn>(dtype, op, copy, [](auto t, auto o) {
    return (LineKernelFn)line_kernel<LLProto, typename decltype(t)::type, typename decltype(o)::type>;
  });
}

}  // namespace mg
