/* The device-pointer guard: a table of address ranges that the fake CUDA layer reports as device
 * memory, and the check that the generated MPI wrappers (guard_build.py) run on every buffer
 * argument before calling the PMPI entry point.
 *
 * Loaded into each rank with LD_PRELOAD, so it sits below mpi4py's Cython calls. The fake layer
 * (tests/mpi/fake_device.py) fills the table through mpigpu_guard_register/unregister (ctypes).
 * A pointer inside a registered range is a device pointer reaching an MPI that is not CUDA-aware:
 * the guard writes one line naming the function, the argument, the pointer and the test running
 * (mpigpu_guard_set_context) to stderr and to $MPIGPU_GUARD_LOG, then, by default, ends the
 * process with MPIGPU_GUARD_EXIT. MPIGPU_GUARD_MODE=report records and goes on instead: the fake
 * "device" memory is host memory, so MPI can still use it and one run lists every leak.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef MPIGPU_GUARD_EXIT /* the exit status of a process the guard ends: guard_build.py passes it */
#error "build with -DMPIGPU_GUARD_EXIT=<status> (guard_build.py does)"
#endif

typedef struct {
    uintptr_t start, end; /* [start, end) */
} range_t;

static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static range_t *ranges;
static size_t nranges, capacity;
static unsigned long long calls_checked, hits, registered_total;
static char context[512] = "outside any test";

int mpigpu_guard_register(uintptr_t ptr, size_t nbytes) {
    if (nbytes == 0) return 0; /* an empty buffer has no memory MPI could touch */
    pthread_rwlock_wrlock(&lock);
    if (nranges == capacity) {
        size_t cap = capacity ? 2 * capacity : 64;
        range_t *grown = realloc(ranges, cap * sizeof(range_t));
        if (grown == NULL) {
            pthread_rwlock_unlock(&lock);
            return -1;
        }
        ranges = grown;
        capacity = cap;
    }
    ranges[nranges].start = ptr;
    ranges[nranges].end = ptr + nbytes;
    nranges++;
    registered_total++;
    pthread_rwlock_unlock(&lock);
    return 0;
}

/* Removes one registration of exactly this range (the same memory may be registered twice). */
int mpigpu_guard_unregister(uintptr_t ptr, size_t nbytes) {
    int found = -1;
    pthread_rwlock_wrlock(&lock);
    for (size_t i = nranges; i-- > 0;) {
        if (ranges[i].start == ptr && ranges[i].end == ptr + nbytes) {
            ranges[i] = ranges[--nranges];
            found = 0;
            break;
        }
    }
    pthread_rwlock_unlock(&lock);
    return nbytes == 0 ? 0 : found;
}

void mpigpu_guard_set_context(const char *what) {
    pthread_rwlock_wrlock(&lock);
    snprintf(context, sizeof context, "%s", what ? what : "");
    pthread_rwlock_unlock(&lock);
}

/* counters for the harness: wrapped calls seen, device pointers caught, ranges ever registered */
unsigned long long mpigpu_guard_calls(void) { return __atomic_load_n(&calls_checked, __ATOMIC_RELAXED); }
unsigned long long mpigpu_guard_hits(void) { return __atomic_load_n(&hits, __ATOMIC_RELAXED); }
unsigned long long mpigpu_guard_registered(void) { return __atomic_load_n(&registered_total, __ATOMIC_RELAXED); }

static void report(const char *fn, const char *arg, uintptr_t p, range_t r) {
    char line[1024];
    int n;
    pthread_rwlock_rdlock(&lock);
    n = snprintf(line, sizeof line,
                 "mpigpu-guard: device pointer reached MPI: %s(%s=%#lx) inside device range %#lx+%lu "
                 "pid %ld test [%s]\n",
                 fn, arg, (unsigned long)p, (unsigned long)r.start, (unsigned long)(r.end - r.start),
                 (long)getpid(), context);
    pthread_rwlock_unlock(&lock);
    if (n < 0) return;
    if ((size_t)n >= sizeof line) n = sizeof line - 1;
    /* one write per line: lines of several ranks never interleave */
    ssize_t ignored = write(2, line, (size_t)n);
    const char *log = getenv("MPIGPU_GUARD_LOG");
    if (log && *log) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            ignored = write(fd, line, (size_t)n);
            close(fd);
        }
    }
    (void)ignored;
}

/* Called by every generated wrapper for each of its buffer arguments. */
void mpigpu_guard_check(const char *fn, const char *arg, const void *ptr) {
    uintptr_t p = (uintptr_t)ptr;
    range_t hit = {0, 0};
    int found = 0;
    __atomic_add_fetch(&calls_checked, 1, __ATOMIC_RELAXED);
    pthread_rwlock_rdlock(&lock);
    for (size_t i = 0; i < nranges; i++) {
        if (p >= ranges[i].start && p < ranges[i].end) {
            hit = ranges[i];
            found = 1;
            break;
        }
    }
    pthread_rwlock_unlock(&lock);
    if (!found) return;
    __atomic_add_fetch(&hits, 1, __ATOMIC_RELAXED);
    report(fn, arg, p, hit);
    const char *mode = getenv("MPIGPU_GUARD_MODE");
    if (mode && strcmp(mode, "report") == 0) return;
    _exit(MPIGPU_GUARD_EXIT); /* not MPI_Abort: the job must end even if MPI is the broken part */
}
