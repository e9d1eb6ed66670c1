// fault.cuh: the record of a fault, shared by the kernels (protocol.cuh: waits that stop) and the host
// (collectives.cu, transport_ipc.cu, completion.cu: the codes a call or a request returns).
//
// A wait that stops (its deadline passed, the host asked to abort, or the team was marked broken)
// leaves a fault word: the cause in the low byte and the rank whose wait or host first gave up above
// it. The word travels unchanged from the rank that gave up into every peer's TeamState::broken, so
// every rank reports the first cause and its origin, not "a peer stopped".
#pragma once
#include <stdint.h>
#include "mpigpu_cuda.h"

namespace mg {

enum FaultCause : uint32_t { kCauseTimeout = 1, kCauseAbort = 2 };

__host__ __device__ inline uint32_t fault_word(uint32_t cause, int origin) { return cause | (uint32_t)origin << 8; }
__host__ __device__ inline int fault_origin(uint32_t word) { return (int)(word >> 8 & 0xffu); }

// The C ABI's code of a fault word (0: none).
__host__ __device__ inline int fault_code(uint32_t word) {
  if (!word) return MG_OK;
  return (word & 0xffu) == kCauseAbort ? MG_ERR_ABORTED : MG_ERR_TIMEOUT;
}

// One per team, in mapped pinned host memory: the host's abort request, read by the kernels' waits
// (every 1024 polls, so while they run), and the kernels' record of a fault, which the host reads
// after a call without a device round trip.
struct FaultBox {
  uint32_t abort;       // host: nonzero asks every wait of the team's kernels to stop (mg_team_abort)
  uint32_t fault;       // kernels: the fault word of this rank's first faulted call (0: none)
  uint32_t abort_word;  // host: what mg_team_abort copies into every TeamState::broken (the copy's source)
  uint32_t read[MG_MAX_RANKS];  // host: where its copies of the ranks' TeamState words land (fault.cu)
};

// What every kernel's waits watch besides their condition (a field of each kernel's arguments).
struct Watch {
  uint64_t timeout_ns;  // MPIGPU_TIMEOUT_S
  FaultBox *box;        // the team's, as the device addresses it
  uint32_t *status;     // a request's own fault word (completion.cu), or null
};

}  // namespace mg
