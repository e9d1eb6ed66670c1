/* The engine's entry (mpigpu/_ext/_pmpi_entry.pxi), as the interposer (interpose.c) calls it: shared by
 * both sides, so the answers below are written once. Plain C: the Cython extension includes it too. */
#pragma once
#include <stdint.h>

/* The call of function `id` with its parameters as words; mask: bit b set where the function's b-th
 * buffer is device memory, ordinals[b] that buffer's device (-1: host memory). */
typedef int (*mgi_engine)(int id, const intptr_t *args, unsigned mask, const int *ordinals);

/* What the entry answers besides MPI's codes (MPI_SUCCESS or an error code once it ran the call):
 * MGI_ENTRY_HANDLER, not its own, the handler takes it; MGI_ENTRY_LOWER, a host-buffer call it posted
 * for its communicator's peers, which the MPI library below makes as it is. */
enum { MGI_ENTRY_HANDLER = -1, MGI_ENTRY_LOWER = -2 };
/* And from the host routes only (host_routes.h): not the entry's, straight to the handler (its post timed
 * out). */
enum { MGI_ENTRY_HANDLER_ONLY = -3 };

/* What a host-buffer call of a function other than the engine collectives needs before the library makes
 * it, as mpigpu's method of that name does (the handler's rule, asked once per communicator class and
 * function): a collective code >= 0 it posts for its peers, or one of these. */
enum { MGI_HOST_UNPOSTED = -1, MGI_HOST_HANDLER = -2 };
