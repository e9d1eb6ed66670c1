// single_rank.cuh: the copy that every collective of a one-rank team is (single_rank.cu).
#pragma once
#include <stddef.h>
#include <stdint.h>

namespace mg {
// Enqueues a copy of `bytes` from `src` to `dst` (device memory, not overlapping unless equal) on
// `stream`; nothing when the pointers are equal or bytes is 0. Returns 0 or a CUDA error code.
int single_rank_copy(uintptr_t dst, uintptr_t src, size_t bytes, uintptr_t stream);
}
