// kernel_table.cu: the instantiations of the kernels (direct, LL, LL128, ring), one per (storage
// type, operator) that the contract needs. Signed and unsigned integers share one kernel except for
// MAX/MIN (dtypes.cuh).
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

// Every op on the unsigned storage type U; MAX/MIN on S (the signed or unsigned type of the dtype).
template <typename U, typename S> static KernelChoice integer_kernel(int op) {
  switch (op) {
    case MG_SUM: return K<U, OpSum>();
    case MG_PROD: return K<U, OpProd>();
    case MG_MAX: return K<S, OpMax>();
    case MG_MIN: return K<S, OpMin>();
    case MG_LAND: return K<U, OpLand>();
    case MG_LOR: return K<U, OpLor>();
    case MG_LXOR: return K<U, OpLxor>();
    case MG_BAND: return K<U, OpBand>();
    case MG_BOR: return K<U, OpBor>();
    case MG_BXOR: return K<U, OpBxor>();
  }
  return KernelChoice{};
}

template <typename F> static KernelChoice float_kernel(int op) {
  switch (op) {
    case MG_SUM: return K<F, OpSum>();
    case MG_PROD: return K<F, OpProd>();
    case MG_MAX: return K<F, OpMax>();
    case MG_MIN: return K<F, OpMin>();
  }
  return KernelChoice{};
}

KernelChoice reduce_kernel(int dtype, int op) {
  const KernelChoice none{};
  switch (dtype) {
    case MG_BOOL:  // MPI allows only the logical ops on C_BOOL
      return op == MG_LAND || op == MG_LOR || op == MG_LXOR ? integer_kernel<uint8_t, uint8_t>(op) : none;
    case MG_INT8: return integer_kernel<uint8_t, int8_t>(op);
    case MG_UINT8: return integer_kernel<uint8_t, uint8_t>(op);
    case MG_INT16: return integer_kernel<uint16_t, int16_t>(op);
    case MG_UINT16: return integer_kernel<uint16_t, uint16_t>(op);
    case MG_INT32: return integer_kernel<uint32_t, int32_t>(op);
    case MG_UINT32: return integer_kernel<uint32_t, uint32_t>(op);
    case MG_INT64: return integer_kernel<uint64_t, int64_t>(op);
    case MG_UINT64: return integer_kernel<uint64_t, uint64_t>(op);
    case MG_FLOAT16: return float_kernel<__half>(op);
    case MG_BFLOAT16: return float_kernel<__nv_bfloat16>(op);
    case MG_FLOAT32: return float_kernel<float>(op);
    case MG_FLOAT64: return float_kernel<double>(op);
    case MG_COMPLEX64:
      return op == MG_SUM ? K<float, OpSum>(2) : op == MG_PROD ? K<float2, OpCprod>() : none;
    case MG_COMPLEX128:
      return op == MG_SUM ? K<double, OpSum>(2) : op == MG_PROD ? K<double2, OpCprod>() : none;
  }
  return none;
}

KernelChoice copy_kernel(int dtype) {
  switch (dtype) {
    case MG_BOOL: case MG_INT8: case MG_UINT8: return K<uint8_t, OpCopy>();
    case MG_INT16: case MG_UINT16: case MG_FLOAT16: case MG_BFLOAT16: return K<uint16_t, OpCopy>();
    case MG_INT32: case MG_UINT32: case MG_FLOAT32: return K<uint32_t, OpCopy>();
    case MG_INT64: case MG_UINT64: case MG_FLOAT64: return K<uint64_t, OpCopy>();
    // complex copies move components: a complex element may be aligned only like one (AlignUnitOf)
    case MG_COMPLEX64: return K<uint32_t, OpCopy>(2);
    case MG_COMPLEX128: return K<uint64_t, OpCopy>(2);
  }
  return KernelChoice{};
}

}  // namespace mg
