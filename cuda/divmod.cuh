// divmod.cuh: division by a divisor fixed for a whole kernel call, by multiplication where the
// numerators allow it (the index arithmetic of the pack kernels and of the exchange's block shapes).
// __host__ __device__ throughout: host emulators (tests/*_emulator.cpp) run the same arithmetic.
#pragma once
#include <stdint.h>

namespace mg {

constexpr int64_t kFastLimit = (int64_t)1 << 31;  // numerators below this divide by multiplication

// Division by a divisor fixed for the call. mul != 0: numerators are below 2^31 and the quotient is
// (umulhi(n, mul) + n) >> shift (Granlund and Montgomery); mul == 0: plain 64-bit division.
struct DivMod {
  uint64_t d;
  uint32_t mul, shift;

  __host__ __device__ __forceinline__ uint64_t div(uint64_t n) const {
    if (mul == 0) return n / d;
    const uint32_t x = (uint32_t)n;
#ifdef __CUDA_ARCH__
    const uint32_t hi = __umulhi(x, mul);
#else
    const uint32_t hi = (uint32_t)(((uint64_t)x * mul) >> 32);
#endif
    return (hi + x) >> shift;
  }
};

// The DivMod of d; `fast`: every numerator it will see is below kFastLimit.
inline DivMod make_divmod(uint64_t d, bool fast) {
  DivMod m{d, 0, 0};
  if (fast && d >= 1 && d < (uint64_t)kFastLimit) {
    uint32_t l = 0;
    while (((uint64_t)1 << l) < d) ++l;
    m.mul = (uint32_t)((((uint64_t)1 << 32) * (((uint64_t)1 << l) - d)) / d + 1);
    m.shift = l;
  }
  return m;
}

}  // namespace mg
