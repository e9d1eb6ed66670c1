/* board.h: the placement board, where the ranks of one node agree on the path of each collective call.
 *
 * One call, one contract: a rank may pass device memory while another passes host memory in the same
 * call, so no rank may pick the call's path alone. Every rank posts, per call of a communicator, what
 * it brings (the host MPI call, or device buffers the engine can take, or a refusal of its own
 * arguments); a rank with device buffers reads every peer's post for that call and takes the engine
 * only when every rank brought device buffers; otherwise every rank makes the same host MPI call.
 *
 * The board is a file mapped by the node's ranks (mpigpu/_state/agree.py makes it). Host ranks only write
 * (a store and a flag: no MPI message, no wait), so programs that pass host buffers pay nothing
 * measurable; device ranks read their peers' lines. Layout, in 64-bit words:
 *   line 0: header;  line 1 + r: rank r's ack (the last call it is done reading, or posted as a writer);
 *   then per rank a ring of MG_BOARD_DEPTH entries, entry k % depth holding call k's post.
 * An entry is (call << 16) | (collective << 8) | placement. A rank overwrites its entry of call k - depth
 * only once every rank has acked k - depth, so a fast writer waits only when it is depth calls ahead
 * (collectives may synchronize: MPI allows it).
 * A communicator spanning nodes has one board per node ('nodes' mode, mpigpu/_state/agree_nodes.py): the node's
 * leader (board rank 0) then agrees with the other nodes' leaders through MPI and publishes each call's
 * verdict in a last ring of MG_BOARD_DEPTH words, entry k % depth = (call << 16) | verdict. A rank that
 * waits for it acks call k only once it has read it, so the leader's next store into that entry (call
 * k + depth) comes after every reader of call k.
 * No code here allocates, calls MPI or takes the GIL.
 */
#ifndef MPIGPU_BOARD_H
#define MPIGPU_BOARD_H

#include <sched.h>
#include <stdint.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
static inline void mg_board_relax(void) { _mm_pause(); }
#elif defined(__aarch64__)
static inline void mg_board_relax(void) { __asm__ volatile("yield" ::: "memory"); }
#else
static inline void mg_board_relax(void) {}
#endif

/* What one rank brings to a call (a post), and what the call's ranks agreed (the verdict). Written
 * once, as X-macro tables; mpigpu/_ext/_codes.pyx reads the names (mpigpu/_base/codes.py: Placement,
 * Verdict). Placement 0 is an empty entry. */
#define MG_PLACEMENTS(X) X(NONE) X(HOST_MPI) X(DEVICE) X(REFUSED) X(GAVE_UP)
/* DEVICE: every rank brought device buffers (the engine, the hierarchical or the staged path);
 * HOST_MPI: every rank makes the host MPI call (device buffers through mirrors or a CUDA-aware MPI);
 * REFUSED: a rank refused its own arguments; MISMATCH: ranks are in different collectives (a call made
 * outside mpigpu on some rank); TIMEOUT: a rank never posted within the deadline; BROKEN: a rank gave
 * up on the call (a timeout, an abort). */
#define MG_VERDICTS(X) X(DEVICE) X(HOST_MPI) X(REFUSED) X(MISMATCH) X(TIMEOUT) X(BROKEN)

#define MG_BOARD_ENUM_(NAME) MG_PLACE_##NAME,
enum mg_placement { MG_PLACEMENTS(MG_BOARD_ENUM_) MG_NPLACEMENTS };
#undef MG_BOARD_ENUM_
#define MG_BOARD_ENUM_(NAME) MG_VERDICT_##NAME,
enum mg_verdict { MG_VERDICTS(MG_BOARD_ENUM_) MG_NVERDICTS };
#undef MG_BOARD_ENUM_

#define MG_BOARD_NAME_ROW_(NAME) #NAME,
static inline const char *mg_placement_name(int code) {
  static const char *names[MG_NPLACEMENTS] = {MG_PLACEMENTS(MG_BOARD_NAME_ROW_)};
  return code >= 0 && code < MG_NPLACEMENTS ? names[code] : 0;
}
static inline const char *mg_verdict_name(int code) {
  static const char *names[MG_NVERDICTS] = {MG_VERDICTS(MG_BOARD_NAME_ROW_)};
  return code >= 0 && code < MG_NVERDICTS ? names[code] : 0;
}
#undef MG_BOARD_NAME_ROW_

#define MG_BOARD_DEPTH 256           /* calls a rank may run ahead of the slowest reader */
#define MG_BOARD_BEHIND (-2)         /* a TIMEOUT verdict's rank when nothing was posted: the slowest rank
                                      * stayed a whole ring behind */
#define MG_BOARD_LINE_WORDS 8        /* 64-byte lines: each rank's ack on a line of its own */
#define MG_BOARD_MAGIC 0x6d67626f61726431ULL
#define MG_BOARD_CHECK_SPINS 256     /* spins between looks at the clock */
/* A wait longer than this gives its core up at each look at the clock (sched_yield): where ranks
 * outnumber cores (the CPU tests, ranks sharing a GPU) the rank it waits for may need that core; a
 * rank with a core of its own gets it back at once. The ranks of a call arrive within microseconds. */
#define MG_BOARD_YIELD_AFTER_S 50e-6

enum { MG_BOARD_HEADER_MAGIC = 0, MG_BOARD_HEADER_NLOCAL = 1, MG_BOARD_HEADER_MAPPED = 2 };

/* The bytes of a board for n ranks (their rings, then the leader's verdicts). */
static inline uint64_t mg_board_bytes(int n) {
  return 8ull * ((uint64_t)MG_BOARD_LINE_WORDS * (1 + (uint64_t)n) + ((uint64_t)n + 1) * MG_BOARD_DEPTH);
}

/* One rank's handle on a mapped board (process memory; the board itself is shared). */
typedef struct mg_board {
  uint64_t *base;    /* the mapping */
  int n, me;         /* the node's ranks on the board, this rank's place among them */
  uint64_t call;     /* calls this rank has posted */
  uint64_t min_ack;  /* the lowest ack this rank last saw (flow control) */
  double timeout_s;
} mg_board;

static inline uint64_t *mg_board_ack(const mg_board *b, int r) { return b->base + MG_BOARD_LINE_WORDS * (1 + r); }
static inline uint64_t *mg_board_ring(const mg_board *b, int r) {
  return b->base + MG_BOARD_LINE_WORDS * (1 + b->n) + (uint64_t)r * MG_BOARD_DEPTH;
}
/* The leader's published verdicts ('nodes' mode): after every rank's ring. */
static inline uint64_t *mg_board_verdicts(const mg_board *b) { return mg_board_ring(b, b->n); }
static inline uint64_t mg_board_load(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void mg_board_store(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

static inline double mg_board_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Joins a mapped board: counts this rank as mapped; returns the count after it (the rank that makes
 * it n may remove the file's name). */
static inline uint64_t mg_board_join(mg_board *b, uint64_t *base, int n, int me, double timeout_s) {
  b->base = base;
  b->n = n;
  b->me = me;
  b->call = 0;
  b->min_ack = 0;
  b->timeout_s = timeout_s;
  __atomic_compare_exchange_n(base + MG_BOARD_HEADER_MAGIC, &(uint64_t){0}, MG_BOARD_MAGIC, 0, __ATOMIC_ACQ_REL,
                              __ATOMIC_ACQUIRE);
  __atomic_compare_exchange_n(base + MG_BOARD_HEADER_NLOCAL, &(uint64_t){0}, (uint64_t)n, 0, __ATOMIC_ACQ_REL,
                              __ATOMIC_ACQUIRE);
  return __atomic_add_fetch(base + MG_BOARD_HEADER_MAPPED, 1, __ATOMIC_ACQ_REL);
}

/* 1 when the board was made by a rank that agrees on its shape. */
static inline int mg_board_valid(const mg_board *b) {
  return mg_board_load(b->base + MG_BOARD_HEADER_MAGIC) == MG_BOARD_MAGIC &&
         mg_board_load(b->base + MG_BOARD_HEADER_NLOCAL) == (uint64_t)b->n;
}

/* The lowest ack of the board's ranks. */
static inline uint64_t mg_board_min_ack(const mg_board *b) {
  uint64_t low = UINT64_MAX;
  for (int r = 0; r < b->n; ++r) {
    uint64_t a = mg_board_load(mg_board_ack(b, r));
    if (a < low) low = a;
  }
  return low;
}

/* 1 when this rank's next post may wait for the slowest rank (it is a whole ring ahead of the acks it
 * last saw): about once per ring of calls, the caller then lets go of the GIL. */
static inline int mg_board_may_wait(const mg_board *b) {
  uint64_t k = b->call + 1;
  return k > MG_BOARD_DEPTH && b->min_ack < k - MG_BOARD_DEPTH;
}

/* Posts this rank's placement for its next call of collective `coll`: 0, or -1 when the slowest
 * rank stayed depth calls behind past the deadline (nothing posted). A rank that posts anything but
 * DEVICE reads nothing for this call and acks it at once. */
static inline int mg_board_post(mg_board *b, int coll, int placement) {
  uint64_t k = b->call + 1;
  if (k > MG_BOARD_DEPTH && b->min_ack < k - MG_BOARD_DEPTH) {
    double start = 0.0;
    unsigned spins = 0;
    while ((b->min_ack = mg_board_min_ack(b)) < k - MG_BOARD_DEPTH) {
      mg_board_relax();
      if (++spins % MG_BOARD_CHECK_SPINS == 0) {
        double now = mg_board_now();
        if (start == 0.0) start = now;
        else if (now - start > b->timeout_s) return -1;
        else if (now - start > MG_BOARD_YIELD_AFTER_S) sched_yield();
      }
    }
  }
  __atomic_store_n(&b->call, k, __ATOMIC_RELEASE);  /* (read by a give_up from another thread) */
  mg_board_store(mg_board_ring(b, b->me) + k % MG_BOARD_DEPTH,
                 (k << 16) | ((uint64_t)(coll & 0xff) << 8) | (uint64_t)(placement & 0xff));
  if (placement != MG_PLACE_DEVICE) {
    mg_board_store(mg_board_ack(b, b->me), k);
    return 0;
  }
  /* The peers' entries this rank will read: fetched now, while it does its own work before the look
   * (the last rank to post then finds them in its cache: their misses are off its critical path). */
  for (int r = 0; r < b->n; ++r)
    if (r != b->me) __builtin_prefetch(mg_board_ring(b, r) + k % MG_BOARD_DEPTH, 0, 3);
  return 0;
}

/* One look at every peer's post for this rank's call k (posted DEVICE, the oldest it has not decided):
 * -1 while some have not posted (*who the first of them), else the node's verdict (*who: for REFUSED,
 * MISMATCH and BROKEN the first rank concerned, else -1). Reads only: the call is not acked. */
static inline int mg_board_scan_call(mg_board *b, uint64_t k, int coll, int *who) {
  uint64_t slot = k % MG_BOARD_DEPTH;
  int verdict = MG_VERDICT_DEVICE, culprit = -1;
  if ((mg_board_load(mg_board_ring(b, b->me) + slot) & 0xff) == MG_PLACE_GAVE_UP) {
    *who = b->me;  /* aborted from another thread while waiting */
    return MG_VERDICT_BROKEN;
  }
  for (int r = 0; r < b->n; ++r) {
    if (r == b->me) continue;
    uint64_t e = mg_board_load(mg_board_ring(b, r) + slot);
    if ((e >> 16) != k) {
      *who = r;
      return -1;
    }
    int place = (int)(e & 0xff), theirs = (int)((e >> 8) & 0xff);
    if (place == MG_PLACE_GAVE_UP) {
      *who = r;
      return MG_VERDICT_BROKEN;
    }
    if (theirs != coll) {
      if (verdict != MG_VERDICT_MISMATCH) verdict = MG_VERDICT_MISMATCH, culprit = r;
    } else if (place == MG_PLACE_REFUSED) {
      if (verdict == MG_VERDICT_DEVICE || verdict == MG_VERDICT_HOST_MPI) verdict = MG_VERDICT_REFUSED, culprit = r;
    } else if (place != MG_PLACE_DEVICE && verdict == MG_VERDICT_DEVICE) {
      verdict = MG_VERDICT_HOST_MPI;
    }
  }
  *who = culprit;
  return verdict;
}

/* What board rank r posted for call k (MG_PLACE_*), or -1 where its entry holds another call. */
static inline int mg_board_placement_of(const mg_board *b, uint64_t k, int r) {
  uint64_t e = mg_board_load(mg_board_ring(b, r) + k % MG_BOARD_DEPTH);
  return (e >> 16) == k ? (int)(e & 0xff) : -1;
}

/* This rank is done reading call k: its peers may reuse their entries of it. */
static inline void mg_board_ack_call(mg_board *b, uint64_t k) { mg_board_store(mg_board_ack(b, b->me), k); }

/* mg_board_scan_call, and once the verdict is in, the call acked: a verdict is final, so its entries may
 * be reused. */
static inline int mg_board_look_call(mg_board *b, uint64_t k, int coll, int *who) {
  int v = mg_board_scan_call(b, k, coll, who);
  if (v >= 0) mg_board_ack_call(b, k);
  return v;
}

/* The leader publishes the verdict of its call k that the nodes' leaders agreed on. */
static inline void mg_board_publish(mg_board *b, uint64_t k, int verdict) {
  mg_board_store(mg_board_verdicts(b) + k % MG_BOARD_DEPTH, (k << 16) | (uint64_t)(verdict & 0xff));
}

/* One look at the leader's verdict of this rank's call k: -1 while it is not published, BROKEN (*who 0)
 * where the leader gave up on the call, else the verdict. Reads only. */
static inline int mg_board_published_call(mg_board *b, uint64_t k, int *who) {
  uint64_t e = mg_board_load(mg_board_verdicts(b) + k % MG_BOARD_DEPTH);
  *who = -1;
  if ((e >> 16) == k) return (int)(e & 0xff);
  e = mg_board_load(mg_board_ring(b, 0) + k % MG_BOARD_DEPTH);
  if ((e >> 16) == k && (e & 0xff) == MG_PLACE_GAVE_UP) {
    *who = 0;
    return MG_VERDICT_BROKEN;
  }
  return -1;
}

/* mg_board_look_call of this rank's last call. */
static inline int mg_board_look(mg_board *b, int coll, int *who) { return mg_board_look_call(b, b->call, coll, who); }

/* How many peers have not posted this rank's call k yet; the first `max` of them in out[]. Reads only
 * (no ack): for error messages. */
static inline int mg_board_missing_call(const mg_board *b, uint64_t k, int *out, int max) {
  uint64_t slot = k % MG_BOARD_DEPTH;
  int count = 0;
  for (int r = 0; r < b->n; ++r) {
    if (r == b->me || (mg_board_load(mg_board_ring(b, r) + slot) >> 16) == k) continue;
    if (count < max) out[count] = r;
    ++count;
  }
  return count;
}

static inline int mg_board_missing(const mg_board *b, int *out, int max) {
  return mg_board_missing_call(b, b->call, out, max);
}

/* This rank gives up on its calls from `from` (0: its last call) to its last (its wait timed out, or an
 * abort from any thread; several when non-blocking calls were still undecided): their posts become
 * GAVE_UP, so a peer that comes later learns the communicator is broken instead of waiting. */
static inline void mg_board_give_up_from(mg_board *b, uint64_t from) {
  uint64_t last = __atomic_load_n(&b->call, __ATOMIC_ACQUIRE);
  if (last == 0 || b->base == 0) return;
  if (from == 0 || from > last) from = last;
  if (last - from >= MG_BOARD_DEPTH) from = last - MG_BOARD_DEPTH + 1;
  for (uint64_t k = from; k <= last; ++k) {
    uint64_t *e = mg_board_ring(b, b->me) + k % MG_BOARD_DEPTH;
    uint64_t old = mg_board_load(e);
    /* only the entry of call k, whoever else stores into it meanwhile (the owner posting the next call) */
    while ((old >> 16) == k &&
           !__atomic_compare_exchange_n(e, &old, (old & ~(uint64_t)0xff) | MG_PLACE_GAVE_UP, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
    }
  }
}

static inline void mg_board_give_up(mg_board *b) { mg_board_give_up_from(b, 0); }

/* What one of the looks above answers: 0 every peer's post, acked (mg_board_look_call); 1 the same,
 * not acked (mg_board_scan_call); 2 the leader's published verdict (mg_board_published_call). */
enum { MG_BOARD_LOOK = 0, MG_BOARD_SCAN = 1, MG_BOARD_PUBLISHED = 2 };

static inline int mg_board_look_as(mg_board *b, int what, uint64_t k, int coll, int *who) {
  return what == MG_BOARD_LOOK ? mg_board_look_call(b, k, coll, who)
         : what == MG_BOARD_SCAN ? mg_board_scan_call(b, k, coll, who)
                                 : mg_board_published_call(b, k, who);
}

/* The answer of look `what` for this rank's call k (posted DEVICE), waiting for it: spins first, then
 * (spin_s passed: -1; the caller may release the GIL, or leave a non-blocking call undecided) until the
 * deadline, when it returns MG_VERDICT_TIMEOUT with *who a rank that never posted. */
static inline int mg_board_wait_as(mg_board *b, int what, uint64_t k, int coll, int *who, double spin_s) {
  unsigned spins = 0;
  double start = 0.0;
  int v;
  while ((v = mg_board_look_as(b, what, k, coll, who)) < 0) {
    mg_board_relax();
    if (++spins % MG_BOARD_CHECK_SPINS == 0) {
      double now = mg_board_now();
      if (start == 0.0) start = now;
      else if (spin_s > 0.0 && now - start > spin_s) return -1;
      else if (now - start > b->timeout_s) {
        mg_board_give_up_from(b, k);  /* at once: a peer that comes later learns it, instead of entering alone */
        return MG_VERDICT_TIMEOUT;
      } else if (now - start > MG_BOARD_YIELD_AFTER_S) {
        sched_yield();
      }
    }
  }
  return v;
}

/* The verdict of this rank's call k (posted DEVICE), waiting for every peer's post (mg_board_wait_as). */
static inline int mg_board_wait_call(mg_board *b, uint64_t k, int coll, int *who, double spin_s) {
  return mg_board_wait_as(b, MG_BOARD_LOOK, k, coll, who, spin_s);
}

static inline int mg_board_wait(mg_board *b, int coll, int *who, double spin_s) {
  return mg_board_wait_call(b, b->call, coll, who, spin_s);
}

/* The gate of a blocking engine call (mpigpu_cuda.h, mg_collective_wait_gated): this rank has posted
 * DEVICE; the CUDA layer asks at the last moment before the call runs, so the wait for the peers' posts
 * overlaps this rank's own work before it (the stream's query, an instance's launch). */
typedef struct mg_board_gate {
  mg_board *b;
  int coll, verdict, who, called;
} mg_board_gate;

static inline int mg_board_gate_fn(void *ctx) {
  mg_board_gate *g = (mg_board_gate *)ctx;
  g->called = 1;
  g->verdict = mg_board_wait(g->b, g->coll, &g->who, 0.0);
  return g->verdict != MG_VERDICT_DEVICE;
}

#endif
