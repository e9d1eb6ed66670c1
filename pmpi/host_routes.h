/* The routes of a Python process's host-buffer calls below Python: per communicator, the board its host
 * calls are posted on and, per function, what a call posts. The engine's entry fills them under the GIL,
 * from what it found in Python for the communicator (mpigpu/_ext/_pmpi_entry.pxi, _host_keep); the
 * interposer reads them in the call's own wrapper and posts the call with no GIL, no Python and no call
 * into another library, then makes it on the library below (the wrappers of pmpi/generate.py). Shared by
 * both sides, so the layout and the reader are written once. Plain C; no allocation, no MPI.
 *
 * A slot is used only while the routes' epoch has not moved since it was filled: any change of a
 * communicator's routes (its host hook, its release, undecided non-blocking calls anywhere: mpigpu/_state)
 * moves it (mpigpu/_ext/_board.pyx, routes_changed). The epoch is written last when filling and cleared
 * first, so a thread reading a slot sees a whole entry or none. */
#pragma once
#include <stdint.h>

#include "board.h"
#include "engine_entry.h"

enum {
  MGI_HOST_SLOTS = 8,        /* communicators kept; the ninth takes the oldest slot */
  MGI_HOST_FUNCTIONS = 256,  /* function indices a slot holds (the interposer's MGI_COUNT, checked there) */
  MGI_HOST_UNKNOWN = -3,     /* not asked yet: the engine's entry asks Python */
  MGI_HOST_ROUTES_VERSION = 1, /* moved on with any change of mgi_host_routes' layout */
};

typedef struct {
  uint64_t epoch;   /* the routes' epoch it was filled in; 0: empty */
  intptr_t comm;    /* the communicator's handle word */
  mg_board *board;  /* where its host calls are posted; NULL: nothing to post */
  /* per function: the collective code a call posts, MGI_HOST_UNPOSTED, or MGI_HOST_UNKNOWN */
  signed char post[MGI_HOST_FUNCTIONS];
} mgi_host_slot;

typedef struct {
  uint32_t size, version;   /* sizeof(mgi_host_routes) and MGI_HOST_ROUTES_VERSION of the side that filled
                             * it: an interposer of another build (another layout) does not read them
                             * (mpigpu_pmpi_set_host_routes) */
  const uint64_t *epoch;    /* the routes' epoch */
  mgi_host_slot slots[MGI_HOST_SLOTS];
  /* calls posted from here, on a line of its own (every routed call writes it, every reader loads the
   * slots); counted without a locked add (a statistic: two threads posting at once may lose a count, and
   * the locked add cost a call 9 ns) */
  _Alignas(64) unsigned long long posts;
} mgi_host_routes;

/* A host-buffer call of function `fid` on the communicator with handle word `comm`: posted where the
 * routes know its communicator, MGI_ENTRY_LOWER (the caller makes it on the library); else
 * MGI_ENTRY_HANDLER (the engine's entry asks Python), or MGI_ENTRY_HANDLER_ONLY where the post timed out
 * (nothing posted; the handler's own post raises). */
static inline int mgi_host_route(mgi_host_routes *r, int fid, intptr_t comm) {
  if (fid < 0 || fid >= MGI_HOST_FUNCTIONS) return MGI_ENTRY_HANDLER;
  const uint64_t e = mg_board_load(r->epoch);
  for (int i = 0; i < MGI_HOST_SLOTS; i++) {
    mgi_host_slot *s = &r->slots[i];
    if (mg_board_load(&s->epoch) != e || s->comm != comm) continue;
    const int post = s->post[fid];
    mg_board *board = s->board;
    /* read again: a slot refilled meanwhile (by another thread, under the GIL) is not read half old, nor
     * another communicator's */
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (post == MGI_HOST_UNKNOWN || mg_board_load(&s->epoch) != e || s->comm != comm) return MGI_ENTRY_HANDLER;
    if (post >= 0 && board && mg_board_post(board, post, MG_PLACE_HOST_MPI) != 0) return MGI_ENTRY_HANDLER_ONLY;
    __atomic_store_n(&r->posts, __atomic_load_n(&r->posts, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
    return MGI_ENTRY_LOWER;
  }
  return MGI_ENTRY_HANDLER;
}
