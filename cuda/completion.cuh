// completion.cuh: the request slots of completion.cu as the collectives use them: a request whose
// kernel writes the slot's fault word (fault.cuh: Watch::status) completes with the fault's code.
#pragma once
#include <stdint.h>

// Takes a free slot, its fault word cleared; *fault_word: its device address, for the kernel.
int completion_reserve(int *slot, uint32_t **fault_word);
// Records the slot's event on stream (device current) and starts its generalized request (the
// MPI_Request written to *request, a ticket for mg_completion_wait/test); gives the slot back if that
// fails.
int completion_begin(int slot, uintptr_t stream, int device, void *request, int watch, uint64_t *ticket);
// Gives back a reserved slot whose work could not be enqueued.
void completion_cancel(int slot);
