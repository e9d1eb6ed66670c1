/* A C program that passes device memory (cuMemAlloc) to MPI, as a code written for a CUDA-aware MPI
 * does, and checks MPI's results: run under the interposer (LD_PRELOAD=$(python -m mpigpu --pmpi-path))
 * on a real GPU or on the fake driver of the CPU tests (fake_libcuda.c). Prints one summary line on rank 0
 * and exits 1 where any check failed. */
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the driver's ABI (no CUDA header needed) */
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
CUresult cuInit(unsigned);
CUresult cuDeviceGet(int *, int);
CUresult cuDevicePrimaryCtxRetain(void **, int);
CUresult cuCtxSetCurrent(void *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);
CUresult cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);
int MPIX_Query_cuda_support(void);

static int rank, size, checks, failed;
static int window_errors; /* calls of the window's error handler (on_window_error) */

static void on_window_error(MPI_Win *win, int *code, ...) {
  (void)win, (void)code;
  window_errors++;
}

static pthread_mutex_t check_lock = PTHREAD_MUTEX_INITIALIZER;

static void check(int ok, const char *what) {
  pthread_mutex_lock(&check_lock);
  checks++;
  if (!ok) {
    failed++;
    fprintf(stderr, "device_calls: FAIL %s on rank %d\n", what, rank);
  }
  pthread_mutex_unlock(&check_lock);
}

static void *dalloc(size_t bytes) {
  CUdeviceptr d = 0;
  if (cuMemAlloc_v2(&d, bytes ? bytes : 1)) {
    fprintf(stderr, "device_calls: cuMemAlloc failed\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  return (void *)(uintptr_t)d;
}
static void put(void *d, const void *h, size_t n) { cuMemcpyHtoD_v2((CUdeviceptr)(uintptr_t)d, h, n); }
static void get(void *h, const void *d, size_t n) { cuMemcpyDtoH_v2(h, (CUdeviceptr)(uintptr_t)d, n); }

/* n ints on the device, holding values[i] (or zeros where values is NULL) */
static int *dints(int n, const int *values) {
  int *d = dalloc(n * sizeof(int));
  int *z = calloc(n ? n : 1, sizeof(int));
  put(d, values ? values : z, n * sizeof(int));
  free(z);
  return d;
}
static int *host_of(const int *d, int n) {
  int *h = malloc((n ? n : 1) * sizeof(int));
  get(h, d, n * sizeof(int));
  return h;
}

/* One thread's ring of non-blocking device sends and receives on its own communicator, many rounds: the
 * interposer's held requests are taken by one thread's call at a time, whatever handles the library
 * reuses between threads. */
typedef struct {
  MPI_Comm comm;
  void *ctx; /* the CUDA context, current in the thread too */
  int id, rounds, ok;
} ring_job;

static void *ring_thread(void *arg) {
  ring_job *job = arg;
  cuCtxSetCurrent(job->ctx);
  enum { M = 256 };
  int n, r, host[M];
  MPI_Comm_size(job->comm, &n);
  MPI_Comm_rank(job->comm, &r);
  int *send = dalloc(M * sizeof(int)), *recv = dalloc(M * sizeof(int));
  job->ok = 1;
  for (int k = 0; k < job->rounds; k++) {
    for (int i = 0; i < M; i++) host[i] = (job->id * 1000 + k) * 100 + r;
    put(send, host, sizeof host);
    MPI_Request q[2];
    MPI_Irecv(recv, M, MPI_INT, (r + n - 1) % n, k, job->comm, &q[0]);
    MPI_Isend(send, M, MPI_INT, (r + 1) % n, k, job->comm, &q[1]);
    MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
    get(host, recv, sizeof host);
    for (int i = 0; i < M; i++) job->ok &= host[i] == (job->id * 1000 + k) * 100 + (r + n - 1) % n;
  }
  return NULL;
}

int main(int argc, char **argv) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  void *ctx;
  int dev;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) {
    fprintf(stderr, "device_calls: no CUDA context\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int N = 1000, n = size, r = rank;
  int *h = malloc(N * n * 4 * sizeof(int)), ok;

  check(MPIX_Query_cuda_support() == 1, "MPIX_Query_cuda_support");

  /* Allreduce, out of place and in place; with a host send buffer and a device receive buffer */
  for (int i = 0; i < N; i++) h[i] = r + i;
  int *s = dints(N, h), *d = dints(N, NULL), *g;
  MPI_Allreduce(s, d, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  g = host_of(d, N), ok = 1;
  for (int i = 0; i < N; i++) ok &= g[i] == n * i + n * (n - 1) / 2;
  check(ok, "Allreduce");
  free(g);
  MPI_Allreduce(MPI_IN_PLACE, s, N, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  g = host_of(s, N), ok = 1;
  for (int i = 0; i < N; i++) ok &= g[i] == n - 1 + i;
  check(ok, "Allreduce in place");
  free(g);
  MPI_Allreduce(h, d, N, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  g = host_of(d, N), ok = 1;
  for (int i = 0; i < N; i++) ok &= g[i] == i;
  check(ok, "Allreduce host to device");
  free(g);

  /* Bcast from the last rank; Reduce to rank 0 (no receive buffer elsewhere) */
  for (int i = 0; i < N; i++) h[i] = r == n - 1 ? 7 * i : -1;
  put(d, h, N * sizeof(int));
  MPI_Bcast(d, N, MPI_INT, n - 1, MPI_COMM_WORLD);
  g = host_of(d, N), ok = 1;
  for (int i = 0; i < N; i++) ok &= g[i] == 7 * i;
  check(ok, "Bcast");
  free(g);
  for (int i = 0; i < N; i++) h[i] = r + i;
  put(s, h, N * sizeof(int));
  MPI_Reduce(s, r == 0 ? d : NULL, N, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (r == 0) {
    g = host_of(d, N), ok = 1;
    for (int i = 0; i < N; i++) ok &= g[i] == n * i + n * (n - 1) / 2;
    check(ok, "Reduce");
    free(g);
  }

  /* Allgather (2 each); Reduce_scatter_block (3 each), out of place and in place */
  int two[2] = {r, 10 * r};
  int *s2 = dints(2, two), *big = dints(4 * n, NULL);
  MPI_Allgather(s2, 2, MPI_INT, big, 2, MPI_INT, MPI_COMM_WORLD);
  g = host_of(big, 2 * n), ok = 1;
  for (int j = 0; j < n; j++) ok &= g[2 * j] == j && g[2 * j + 1] == 10 * j;
  check(ok, "Allgather");
  free(g);
  for (int i = 0; i < 3 * n; i++) h[i] = r + i;
  int *s3 = dints(3 * n, h), *d3 = dints(3, NULL);
  MPI_Reduce_scatter_block(s3, d3, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  g = host_of(d3, 3), ok = 1;
  for (int i = 0; i < 3; i++) ok &= g[i] == n * (3 * r + i) + n * (n - 1) / 2;
  check(ok, "Reduce_scatter_block");
  free(g);
  MPI_Reduce_scatter_block(MPI_IN_PLACE, s3, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  g = host_of(s3, 3), ok = 1;
  for (int i = 0; i < 3; i++) ok &= g[i] == n * (3 * r + i) + n * (n - 1) / 2;
  check(ok, "Reduce_scatter_block in place");
  free(g);

  /* a ring of Sendrecv, and Send/Recv with a status */
  for (int i = 0; i < N; i++) h[i] = 100 * r + i;
  put(s, h, N * sizeof(int));
  MPI_Status st;
  MPI_Sendrecv(s, N, MPI_INT, (r + 1) % n, 5, d, N, MPI_INT, (r + n - 1) % n, 5, MPI_COMM_WORLD, &st);
  g = host_of(d, N), ok = st.MPI_SOURCE == (r + n - 1) % n && st.MPI_TAG == 5;
  for (int i = 0; i < N; i++) ok &= g[i] == 100 * ((r + n - 1) % n) + i;
  check(ok, "Sendrecv");
  free(g);
  if (n > 1 && r < 2) {
    if (r == 0) MPI_Send(s, 17, MPI_INT, 1, 9, MPI_COMM_WORLD);
    else {
      int count = -1;
      MPI_Recv(d, N, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
      MPI_Get_count(&st, MPI_INT, &count);
      g = host_of(d, 17), ok = count == 17 && st.MPI_SOURCE == 0 && st.MPI_TAG == 9;
      for (int i = 0; i < 17; i++) ok &= g[i] == i;
      check(ok, "Send/Recv");
      free(g);
    }
    /* a matched probe's message received into device memory (MPI_Mrecv: staged), the handle then null */
    if (r == 0) MPI_Send(s, 11, MPI_INT, 1, 10, MPI_COMM_WORLD);
    else {
      MPI_Message msg;
      int count = -1;
      MPI_Mprobe(0, 10, MPI_COMM_WORLD, &msg, &st);
      MPI_Mrecv(d, N, MPI_INT, &msg, &st);
      MPI_Get_count(&st, MPI_INT, &count);
      g = host_of(d, 11), ok = count == 11 && msg == MPI_MESSAGE_NULL;
      for (int i = 0; i < 11; i++) ok &= g[i] == i;
      check(ok, "Mprobe/Mrecv");
      free(g);
    }
  }

  /* Alltoall (2 each); Alltoallv (j+1 to rank j) */
  for (int j = 0; j < n; j++) h[2 * j] = h[2 * j + 1] = 100 * r + j;
  int *sa = dints(2 * n, h), *ra = dints(2 * n, NULL);
  MPI_Alltoall(sa, 2, MPI_INT, ra, 2, MPI_INT, MPI_COMM_WORLD);
  g = host_of(ra, 2 * n), ok = 1;
  for (int j = 0; j < n; j++) ok &= g[2 * j] == 100 * j + r && g[2 * j + 1] == 100 * j + r;
  check(ok, "Alltoall");
  free(g);
  int *sc = malloc(n * sizeof(int)), *sd = malloc(n * sizeof(int)), *rc = malloc(n * sizeof(int)),
      *rd = malloc(n * sizeof(int)), st_ = 0, rt = 0;
  for (int j = 0; j < n; j++) {
    sc[j] = j + 1, sd[j] = st_, st_ += j + 1;
    rc[j] = r + 1, rd[j] = rt, rt += r + 1;
  }
  for (int j = 0; j < n; j++)
    for (int k = 0; k < sc[j]; k++) h[sd[j] + k] = 1000 * r + j;
  int *sv = dints(st_, h), *rv = dints(rt, NULL);
  MPI_Alltoallv(sv, sc, sd, MPI_INT, rv, rc, rd, MPI_INT, MPI_COMM_WORLD);
  g = host_of(rv, rt), ok = 1;
  for (int j = 0; j < n; j++)
    for (int k = 0; k < rc[j]; k++) ok &= g[rd[j] + k] == 1000 * j + r;
  check(ok, "Alltoallv");
  free(g);

  /* Gatherv to rank 1 % n (r+1 each); Scatter from rank 0 (2 each) */
  int root = 1 % n, total = 0;
  for (int j = 0; j < n; j++) rc[j] = j + 1, rd[j] = total, total += j + 1;
  for (int i = 0; i <= r; i++) h[i] = 10 * r + i;
  int *sg = dints(r + 1, h), *rg = dints(total, NULL);
  MPI_Gatherv(sg, r + 1, MPI_INT, r == root ? rg : NULL, rc, rd, MPI_INT, root, MPI_COMM_WORLD);
  if (r == root) {
    g = host_of(rg, total), ok = 1;
    for (int j = 0; j < n; j++)
      for (int i = 0; i <= j; i++) ok &= g[rd[j] + i] == 10 * j + i;
    check(ok, "Gatherv");
    free(g);
  }
  for (int i = 0; i < 2 * n; i++) h[i] = 3 * i;
  put(sa, h, 2 * n * sizeof(int));
  MPI_Scatter(r == 0 ? sa : NULL, 2, MPI_INT, s2, 2, MPI_INT, 0, MPI_COMM_WORLD);
  g = host_of(s2, 2);
  check(g[0] == 6 * r && g[1] == 6 * r + 3, "Scatter");
  free(g);

  /* Scan and Exscan; Reduce_local */
  for (int i = 0; i < N; i++) h[i] = r + 1;
  put(s, h, N * sizeof(int));
  MPI_Scan(s, d, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  g = host_of(d, N), ok = 1;
  for (int i = 0; i < N; i++) ok &= g[i] == (r + 1) * (r + 2) / 2;
  check(ok, "Scan");
  free(g);
  MPI_Exscan(s, d, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (r > 0) {
    g = host_of(d, N), ok = 1;
    for (int i = 0; i < N; i++) ok &= g[i] == r * (r + 1) / 2;
    check(ok, "Exscan");
    free(g);
  }
  for (int i = 0; i < N; i++) h[i] = i;
  put(d, h, N * sizeof(int));
  MPI_Reduce_local(s, d, N, MPI_INT, MPI_SUM);
  g = host_of(d, N), ok = 1;
  for (int i = 0; i < N; i++) ok &= g[i] == i + r + 1;
  check(ok, "Reduce_local");
  free(g);

  /* Pack and Unpack: two vectors of 4 ints (every other one) from device memory into a device buffer
   * and back into zeroed device memory; the position moves by the packed bytes */
  MPI_Datatype vec;
  MPI_Type_vector(4, 1, 2, MPI_INT, &vec);
  MPI_Type_commit(&vec);
  for (int i = 0; i < 16; i++) h[i] = 100 * r + i;
  int *vsrc = dints(16, h), *vdst = dints(16, NULL), *packed = dints(16, NULL);
  int position = 4, bytes = 4 + 2 * 4 * (int)sizeof(int);
  MPI_Pack(vsrc, 2, vec, packed, 16 * (int)sizeof(int), &position, MPI_COMM_WORLD);
  check(position == bytes, "Pack position");
  g = host_of(packed, 16), ok = g[0] == 0; /* the bytes before the position are left alone */
  for (int k = 0; k < 8; k++) ok &= g[1 + k] == 100 * r + (k / 4) * 7 + 2 * (k % 4);
  check(ok, "Pack");
  free(g);
  position = 4;
  MPI_Unpack(packed, bytes, &position, vdst, 2, vec, MPI_COMM_WORLD);
  check(position == bytes, "Unpack position");
  g = host_of(vdst, 16), ok = 1;
  for (int i = 0; i < 16; i++) ok &= g[i] == ((i < 7 ? i % 2 == 0 : i < 14 && i % 2 == 1) ? 100 * r + i : 0);
  check(ok, "Unpack");
  free(g);
  MPI_Type_free(&vec);

  /* Alltoallw of device memory: i + 1 ints to rank i from byte displacement 4 * i(i+1)/2, r + 1 ints from
   * each rank; a datatype per peer (odd peers a one-int contiguous type): the w-form's bytes per peer */
  {
    int *sc = malloc(n * sizeof(int)), *sd = malloc(n * sizeof(int)), *rc = malloc(n * sizeof(int)),
        *rd = malloc(n * sizeof(int));
    MPI_Datatype one, *types = malloc(n * sizeof(MPI_Datatype));
    MPI_Type_contiguous(1, MPI_INT, &one);
    MPI_Type_commit(&one);
    for (int i = 0, at = 0; i < n; at += i + 1, i++) {
      sc[i] = i + 1, sd[i] = 4 * at, rc[i] = r + 1, rd[i] = 4 * i * (r + 1);
      types[i] = i % 2 ? one : MPI_INT;
      for (int k = 0; k <= i; k++) h[at + k] = 1000 * r + 10 * i + k;
    }
    int *ws = dints(n * (n + 1) / 2, h), *wr = dints(n * (r + 1), NULL);
    check(MPI_Alltoallw(ws, sc, sd, types, wr, rc, rd, types, MPI_COMM_WORLD) == MPI_SUCCESS, "Alltoallw");
    g = host_of(wr, n * (r + 1)), ok = 1;
    for (int i = 0; i < n; i++)
      for (int k = 0; k <= r; k++) ok &= g[i * (r + 1) + k] == 1000 * i + 10 * r + k;
    check(ok, "Alltoallw into device memory");
    free(g), free(sc), free(sd), free(rc), free(rd), free(types);
    MPI_Type_free(&one);
  }

  /* neighbourhood collectives of device memory on a periodic ring (a 1-D Cartesian topology: the left
   * neighbour, then the right, twice the dimensions long): Neighbor_allgather, Neighbor_alltoall,
   * Neighbor_alltoallv and Neighbor_alltoallw, their counts for the topology's degree */
  {
    MPI_Comm ring;
    int dims[1] = {n}, periods[1] = {1};
    MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring);
    const int K = 3, left = (r + n - 1) % n, right = (r + 1) % n;
    for (int b = 0; b < 2; b++)
      for (int k = 0; k < K; k++) h[b * K + k] = 100 * r + 10 * b + k;
    int *ns = dints(2 * K, h), *nr = dints(2 * K, NULL);
    MPI_Neighbor_allgather(ns, K, MPI_INT, nr, K, MPI_INT, ring);
    g = host_of(nr, 2 * K), ok = 1;
    for (int k = 0; k < K; k++) ok &= g[k] == 100 * left + k && g[K + k] == 100 * right + k;
    check(ok, "Neighbor_allgather into device memory");
    free(g);
    MPI_Neighbor_alltoall(ns, K, MPI_INT, nr, K, MPI_INT, ring);
    g = host_of(nr, 2 * K), ok = 1; /* from the left its block for the right, from the right its block 0 */
    for (int k = 0; k < K; k++) ok &= g[k] == 100 * left + 10 + k && g[K + k] == 100 * right + k;
    check(ok, "Neighbor_alltoall into device memory");
    free(g);
    int vc[2] = {K, K}, vd[2] = {K, 0}, zero[6] = {0}; /* (K = 3) the blocks swapped on the way in */
    put(nr, zero, sizeof zero);
    MPI_Neighbor_alltoallv(ns, vc, (int[]){0, K}, MPI_INT, nr, vc, vd, MPI_INT, ring);
    g = host_of(nr, 2 * K), ok = 1;
    for (int k = 0; k < K; k++) ok &= g[K + k] == 100 * left + 10 + k && g[k] == 100 * right + k;
    check(ok, "Neighbor_alltoallv into device memory");
    free(g);
    MPI_Aint wd[2] = {0, (MPI_Aint)(K * sizeof(int))};
    MPI_Datatype wt[2] = {MPI_INT, MPI_INT};
    put(nr, zero, sizeof zero);
    MPI_Neighbor_alltoallw(ns, vc, wd, wt, nr, vc, wd, wt, ring);
    g = host_of(nr, 2 * K), ok = 1;
    for (int k = 0; k < K; k++) ok &= g[k] == 100 * left + 10 + k && g[K + k] == 100 * right + k;
    check(ok, "Neighbor_alltoallw into device memory");
    free(g);
    MPI_Comm_free(&ring);
  }

#if MPI_VERSION >= 4
  /* MPI-4's large-count forms: Allreduce_c and Bcast_c */
  for (int i = 0; i < N; i++) h[i] = r + i;
  put(s, h, N * sizeof(int));
  MPI_Allreduce_c(s, d, (MPI_Count)N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  g = host_of(d, N), ok = 1;
  for (int i = 0; i < N; i++) ok &= g[i] == n * i + n * (n - 1) / 2;
  check(ok, "Allreduce_c");
  free(g);
  MPI_Bcast_c(d, (MPI_Count)N, MPI_INT, n - 1, MPI_COMM_WORLD);
  g = host_of(d, N), ok = 1;
  for (int i = 0; i < N; i++) ok &= g[i] == n * i + n * (n - 1) / 2;
  check(ok, "Bcast_c");
  free(g);
  MPI_Count *vc = malloc(n * sizeof(MPI_Count));
  MPI_Aint *vd = malloc(n * sizeof(MPI_Aint));
  for (int i = 0; i < n; i++) vc[i] = i + 1, vd[i] = (MPI_Aint)i * (i + 1) / 2;
  for (int i = 0; i <= r; i++) h[i] = 7 * r;
  int *vs = dints(r + 1, h), *vr = dints(n * (n + 1) / 2, NULL);
  MPI_Allgatherv_c(vs, (MPI_Count)(r + 1), MPI_INT, vr, vc, vd, MPI_INT, MPI_COMM_WORLD);
  g = host_of(vr, n * (n + 1) / 2), ok = 1;
  for (int i = 0; i < n; i++)
    for (int k = 0; k <= i; k++) ok &= g[vd[i] + k] == 7 * i;
  check(ok, "Allgatherv_c");
  free(g), free(vc), free(vd);
#endif

  /* no handler (a C program): non-blocking calls with device buffers through host copies held until
   * their request completes (MPI_Wait & co. copy back what MPI wrote); persistent ones an MPI error */
  if (argc > 1 && strcmp(argv[1], "--no-handler") == 0) {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Request req, reqs[4];
    char text[MPI_MAX_ERROR_STRING];
    int len = 0, rc_, flag, index;
    for (int i = 0; i < N; i++) h[i] = r + i;
    put(s, h, N * sizeof(int));
    put(d, h, N * sizeof(int)); /* overwritten by the result */
    check(MPI_Iallreduce(s, d, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req) == MPI_SUCCESS, "Iallreduce");
    check(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS && req == MPI_REQUEST_NULL, "Iallreduce's Wait");
    g = host_of(d, N), ok = 1;
    for (int i = 0; i < N; i++) ok &= g[i] == n * i + n * (n - 1) / 2;
    check(ok, "Iallreduce into device memory, after MPI_Wait");
    free(g);
    { /* a neighbourhood collective's non-blocking form (its counts for the topology's degree), held too */
      MPI_Comm ring;
      int dims[1] = {n}, periods[1] = {1}, zero[4] = {0};
      MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring);
      MPI_Comm_set_errhandler(ring, MPI_ERRORS_RETURN);
      int two[4] = {10 * r, 10 * r + 1, 10 * r + 2, 10 * r + 3}, *ns = dints(4, two), *nr = dints(4, zero);
      check(MPI_Ineighbor_alltoall(ns, 2, MPI_INT, nr, 2, MPI_INT, ring, &req) == MPI_SUCCESS &&
                MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS, "Ineighbor_alltoall");
      const int left = (r + n - 1) % n, right = (r + 1) % n;
      g = host_of(nr, 4);
      /* (with fewer than 3 ranks the left and right neighbour are one rank, whose two messages Open MPI's
       * non-blocking form may match either way round: the values only) */
      check(n < 3 ? g[0] + g[1] + g[2] + g[3] == 10 * (left + right) + 6
                  : g[0] == 10 * left + 2 && g[1] == 10 * left + 3 && g[2] == 10 * right && g[3] == 10 * right + 1,
            "Ineighbor_alltoall into device memory, after MPI_Wait");
      free(g);
      MPI_Comm_free(&ring);
    }
    /* a ring of Isend/Irecv of device memory, completed by Waitall; the receive's status counts its ints */
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    for (int i = 0; i < N; i++) h[i] = 1000 * r + i;
    int *rs = dints(N, h), *rr = dints(N, NULL), *rr2 = dints(N, NULL);
    MPI_Status sts[4];
    MPI_Irecv(rr, N, MPI_INT, prev, 7, MPI_COMM_WORLD, &reqs[0]);
    MPI_Isend(rs, N, MPI_INT, next, 7, MPI_COMM_WORLD, &reqs[1]);
    check(MPI_Waitall(2, reqs, sts) == MPI_SUCCESS, "Isend/Irecv's Waitall");
    int got = -1;
    MPI_Get_count(&sts[0], MPI_INT, &got);
    check(got == N && sts[0].MPI_SOURCE == prev, "Irecv's status");
    g = host_of(rr, N), ok = 1;
    for (int i = 0; i < N; i++) ok &= g[i] == 1000 * prev + i;
    check(ok, "Irecv into device memory, after MPI_Waitall");
    free(g);
    /* completed one at a time: Waitany */
    MPI_Irecv(rr2, N, MPI_INT, prev, 8, MPI_COMM_WORLD, &reqs[0]);
    MPI_Irecv(rr, N, MPI_INT, prev, 9, MPI_COMM_WORLD, &reqs[1]);
    MPI_Isend(rs, N, MPI_INT, next, 9, MPI_COMM_WORLD, &reqs[2]);
    MPI_Isend(rs, N, MPI_INT, next, 8, MPI_COMM_WORLD, &reqs[3]);
    int seen = 0;
    for (int done = 0; done < 4; done++) {
      check(MPI_Waitany(4, reqs, &index, MPI_STATUS_IGNORE) == MPI_SUCCESS && index >= 0, "Waitany");
      seen |= 1 << index;
    }
    check(seen == 15 && reqs[0] == MPI_REQUEST_NULL && reqs[3] == MPI_REQUEST_NULL, "Waitany completed each once");
    int *g2 = host_of(rr2, N);
    g = host_of(rr, N), ok = 1;
    for (int i = 0; i < N; i++) ok &= g[i] == 1000 * prev + i && g2[i] == 1000 * prev + i;
    check(ok, "Irecvs into device memory, after MPI_Waitany");
    free(g), free(g2);
    /* MPI_Request_get_status until it says complete: the data is in device memory then; MPI_Test frees it */
    put(rr, h, N * sizeof(int));
    MPI_Irecv(rr, N, MPI_INT, prev, 10, MPI_COMM_WORLD, &reqs[0]);
    MPI_Send(rs, N, MPI_INT, next, 10, MPI_COMM_WORLD);
    for (flag = 0; !flag;) MPI_Request_get_status(reqs[0], &flag, MPI_STATUS_IGNORE);
    g = host_of(rr, N), ok = 1;
    for (int i = 0; i < N; i++) ok &= g[i] == 1000 * prev + i;
    check(ok, "Irecv into device memory, once MPI_Request_get_status said complete");
    free(g);
    for (flag = 0; !flag;) MPI_Test(&reqs[0], &flag, MPI_STATUS_IGNORE);
    check(reqs[0] == MPI_REQUEST_NULL, "Test completes it");
    /* Waitsome and Testany; a complete receive freed (MPI_Request_get_status said so) */
    MPI_Irecv(rr, N, MPI_INT, prev, 15, MPI_COMM_WORLD, &reqs[0]);
    MPI_Irecv(rr2, N, MPI_INT, prev, 16, MPI_COMM_WORLD, &reqs[1]);
    MPI_Send(rs, N, MPI_INT, next, 16, MPI_COMM_WORLD);
    MPI_Send(rs, N, MPI_INT, next, 15, MPI_COMM_WORLD);
    int outcount = 0, indices[2], left = 2;
    while (left > 0) {
      check(MPI_Waitsome(2, reqs, &outcount, indices, MPI_STATUSES_IGNORE) == MPI_SUCCESS && outcount >= 1, "Waitsome");
      left -= outcount;
    }
    g = host_of(rr, N), g2 = host_of(rr2, N), ok = 1;
    for (int i = 0; i < N; i++) ok &= g[i] == 1000 * prev + i && g2[i] == 1000 * prev + i;
    check(ok, "Irecvs into device memory, after MPI_Waitsome");
    free(g), free(g2);
    put(rr, h, N * sizeof(int));
    MPI_Irecv(rr, N, MPI_INT, prev, 17, MPI_COMM_WORLD, &reqs[0]);
    reqs[1] = MPI_REQUEST_NULL;
    MPI_Send(rs, N, MPI_INT, next, 17, MPI_COMM_WORLD);
    for (flag = 0; !flag;) MPI_Testany(2, reqs, &index, &flag, MPI_STATUS_IGNORE);
    check(index == 0 && reqs[0] == MPI_REQUEST_NULL, "Testany");
    g = host_of(rr, N), ok = 1;
    for (int i = 0; i < N; i++) ok &= g[i] == 1000 * prev + i;
    check(ok, "Irecv into device memory, after MPI_Testany");
    free(g);
    /* many held requests at once (a halo exchange's, an all-to-all's): 300 receives and 300 sends of device
     * memory, each its own buffer and tag, completed by one MPI_Waitall (each held request found by its
     * handle: the table grows past its first buckets) */
    {
      enum { kMany = 300 };
      MPI_Request many[2 * kMany];
      int *mr[kMany], *ms[kMany];
      for (int k = 0; k < kMany; k++) {
        const int v = 100000 * r + k;
        ms[k] = dints(1, &v);
        mr[k] = dints(1, NULL);
        MPI_Irecv(mr[k], 1, MPI_INT, prev, 1000 + k, MPI_COMM_WORLD, &many[k]);
      }
      for (int k = 0; k < kMany; k++) MPI_Isend(ms[k], 1, MPI_INT, next, 1000 + k, MPI_COMM_WORLD, &many[kMany + k]);
      check(MPI_Waitall(2 * kMany, many, MPI_STATUSES_IGNORE) == MPI_SUCCESS, "Waitall of 600 requests");
      ok = 1;
      for (int k = 0; k < kMany; k++) {
        int *gk = host_of(mr[k], 1);
        ok &= gk[0] == 100000 * prev + k && many[k] == MPI_REQUEST_NULL && many[kMany + k] == MPI_REQUEST_NULL;
        free(gk);
      }
      check(ok, "600 requests' receives in device memory, after one MPI_Waitall");
    }
    put(rr, h, N * sizeof(int));
    MPI_Irecv(rr, N, MPI_INT, prev, 18, MPI_COMM_WORLD, &req);
    MPI_Send(rs, N, MPI_INT, next, 18, MPI_COMM_WORLD);
    for (flag = 0; !flag;) MPI_Request_get_status(req, &flag, MPI_STATUS_IGNORE);
    check(MPI_Request_free(&req) == MPI_SUCCESS && req == MPI_REQUEST_NULL, "Request_free of a complete Irecv");
    g = host_of(rr, N), ok = 1;
    for (int i = 0; i < N; i++) ok &= g[i] == 1000 * prev + i;
    check(ok, "the freed complete Irecv's data");
    free(g);
    /* a send's request freed while active (a synchronous send: it cannot complete before the receive
     * below is posted): its copy outlives the handle; a receive's refused */
    for (int k = 0; k < 3; k++) {
      MPI_Issend(rs, N, MPI_INT, next, 11, MPI_COMM_WORLD, &req);
      check(MPI_Request_free(&req) == MPI_SUCCESS && req == MPI_REQUEST_NULL, "Request_free of an Issend");
    }
    MPI_Barrier(MPI_COMM_WORLD); /* (every send freed before its receive is posted) */
    for (int k = 0; k < 3; k++) {
      MPI_Recv(rr, N, MPI_INT, prev, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      g = host_of(rr, N), ok = 1;
      for (int i = 0; i < N; i++) ok &= g[i] == 1000 * prev + i;
      check(ok, "a freed Issend's message");
      free(g);
    }
    MPI_Irecv(rr, N, MPI_INT, prev, 12, MPI_COMM_WORLD, &req);
    rc_ = MPI_Request_free(&req);
    MPI_Error_string(rc_, text, &len);
    check(rc_ != MPI_SUCCESS && strstr(text, "MPI_Request_free") && req != MPI_REQUEST_NULL, "Request_free of an Irecv refused");
    MPI_Barrier(MPI_COMM_WORLD); /* (no message of tag 12 before every rank's free: the receive is pending) */
    MPI_Send(rs, N, MPI_INT, next, 12, MPI_COMM_WORLD);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    g = host_of(rr, N), ok = 1;
    for (int i = 0; i < N; i++) ok &= g[i] == 1000 * prev + i;
    check(ok, "the Irecv whose free was refused, completed");
    free(g);
    /* threads (MPI_THREAD_MULTIPLE where the library gives it): two rings at once */
    if (provided == MPI_THREAD_MULTIPLE) {
      ring_job jobs[2];
      pthread_t threads[2];
      for (int t = 0; t < 2; t++) {
        MPI_Comm_dup(MPI_COMM_WORLD, &jobs[t].comm);
        jobs[t].ctx = ctx, jobs[t].id = t, jobs[t].rounds = 200;
        pthread_create(&threads[t], NULL, ring_thread, &jobs[t]);
      }
      for (int t = 0; t < 2; t++) {
        pthread_join(threads[t], NULL);
        check(jobs[t].ok, "a thread's ring of non-blocking device calls");
        MPI_Comm_free(&jobs[t].comm);
      }
    }
    /* persistent requests: their copies held from init to MPI_Request_free, copied in at each MPI_Start
     * and back once a round completes; rounds of a ring with new data each time */
    MPI_Send_init(rs, N, MPI_INT, next, 13, MPI_COMM_WORLD, &reqs[1]);
    MPI_Recv_init(rr, N, MPI_INT, prev, 13, MPI_COMM_WORLD, &reqs[0]);
    for (int round = 0; round < 3; round++) {
      for (int i = 0; i < N; i++) h[i] = 100000 * round + 1000 * r + i;
      put(rs, h, N * sizeof(int));
      check(MPI_Startall(2, reqs) == MPI_SUCCESS, "Startall of persistent device requests");
      check(MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE) == MPI_SUCCESS && reqs[0] != MPI_REQUEST_NULL,
            "their Waitall (the requests stay)");
      g = host_of(rr, N), ok = 1;
      for (int i = 0; i < N; i++) ok &= g[i] == 100000 * round + 1000 * prev + i;
      check(ok, "a persistent receive into device memory, each round");
      free(g);
    }
    MPI_Start(&reqs[0]); /* one more round, completed by Test, then freed */
    MPI_Start(&reqs[1]);
    for (flag = 0; !flag;) MPI_Testall(2, reqs, &flag, MPI_STATUSES_IGNORE);
    g = host_of(rr, N), ok = 1;
    for (int i = 0; i < N; i++) ok &= g[i] == 200000 + 1000 * prev + i;
    check(ok, "a persistent round completed by Testall");
    free(g);
    check(MPI_Request_free(&reqs[0]) == MPI_SUCCESS && MPI_Request_free(&reqs[1]) == MPI_SUCCESS &&
              reqs[0] == MPI_REQUEST_NULL, "Request_free of inactive persistent requests");
#if MPI_VERSION >= 4
    MPI_Allreduce_init(s, d, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &req);
    for (int round = 0; round < 2; round++) { /* the input doubled in round 1: what Start copies in */
      for (int i = 0; i < N; i++) h[i] = (r + i) << round;
      put(s, h, N * sizeof(int));
      MPI_Start(&req);
      MPI_Wait(&req, MPI_STATUS_IGNORE);
      g = host_of(d, N), ok = 1;
      for (int i = 0; i < N; i++) ok &= g[i] == (n * i + n * (n - 1) / 2) << round;
      check(ok, "Allreduce_init's rounds into device memory");
      free(g);
    }
    MPI_Request_free(&req);
    /* partitioned requests of device memory: 4 partitions of N / 4 ints to the next rank, each written on
     * the device and then marked ready (MPI_Pready each; in the second round MPI_Pready_range and
     * MPI_Pready_list); the receiver polls MPI_Parrived and reads each arrived partition from device
     * memory; MPI_Waitall ends the round */
    {
      const int P = 4, C = N / 4;
      int *ps = dints(N, NULL), *pr = dints(N, NULL);
      MPI_Request preq[2];
      check(MPI_Precv_init(pr, P, C, MPI_INT, prev, 14, MPI_COMM_WORLD, MPI_INFO_NULL, &preq[0]) == MPI_SUCCESS &&
                MPI_Psend_init(ps, P, C, MPI_INT, next, 14, MPI_COMM_WORLD, MPI_INFO_NULL, &preq[1]) == MPI_SUCCESS,
            "Psend_init and Precv_init of device memory");
      for (int round = 0; round < 2; round++) {
        check(MPI_Startall(2, preq) == MPI_SUCCESS, "a partitioned round's Startall");
        for (int i = 0; i < N; i++) h[i] = 10000 * r + 100 * round + i;
        for (int q = 0; q < P; q++) {
          put(ps + q * C, h + q * C, C * sizeof(int));
          if (round == 0) MPI_Pready(q, preq[1]);
        }
        if (round == 1) {
          int rest[2] = {3, 2};
          check(MPI_Pready_range(0, 1, preq[1]) == MPI_SUCCESS && MPI_Pready_list(2, rest, preq[1]) == MPI_SUCCESS,
                "Pready_range and Pready_list");
        }
        ok = 1;
        for (int q = 0; q < P; q++) {
          for (flag = 0; !flag;) MPI_Parrived(preq[0], q, &flag);
          g = host_of(pr + q * C, C);
          for (int i = 0; i < C; i++) ok &= g[i] == 10000 * prev + 100 * round + q * C + i;
          free(g);
        }
        check(ok, "partitions read from device memory once MPI_Parrived says they arrived");
        check(MPI_Waitall(2, preq, MPI_STATUSES_IGNORE) == MPI_SUCCESS, "a partitioned round's Waitall");
        g = host_of(pr, N), ok = 1;
        for (int i = 0; i < N; i++) ok &= g[i] == 10000 * prev + 100 * round + i;
        check(ok, "the partitioned receive in device memory after its round");
        free(g);
      }
      check(MPI_Request_free(&preq[0]) == MPI_SUCCESS && MPI_Request_free(&preq[1]) == MPI_SUCCESS,
            "Request_free of partitioned requests");
      /* a datatype of negative extent (each element 4 bytes below the one before): 2 partitions of 3, the
       * buffers given at their last int; and a partition the receiver changes once MPI_Parrived said it
       * arrived keeps the change through the round's completion */
      MPI_Datatype down;
      MPI_Type_create_resized(MPI_INT, 0, -(MPI_Aint)sizeof(int), &down);
      MPI_Type_commit(&down);
      for (int i = 0; i < 6; i++) h[i] = 500 * r + i;
      int *ds = dints(6, h), *dr = dints(6, NULL);
      MPI_Precv_init(dr + 5, 2, 3, down, prev, 15, MPI_COMM_WORLD, MPI_INFO_NULL, &preq[0]);
      MPI_Psend_init(ds + 5, 2, 3, down, next, 15, MPI_COMM_WORLD, MPI_INFO_NULL, &preq[1]);
      MPI_Startall(2, preq);
      MPI_Pready_range(0, 1, preq[1]);
      for (flag = 0; !flag;) MPI_Parrived(preq[0], 1, &flag); /* partition 1: elements 3-5, dr[0..2] */
      put(dr, (int[]){-1, -2, -3}, 3 * sizeof(int));
      check(MPI_Waitall(2, preq, MPI_STATUSES_IGNORE) == MPI_SUCCESS, "partitioned round of a negative extent");
      g = host_of(dr, 6);
      check(g[0] == -1 && g[1] == -2 && g[2] == -3 && g[3] == 500 * prev + 3 && g[4] == 500 * prev + 4 &&
                g[5] == 500 * prev + 5,
            "negative-extent partitions in device memory; an arrived partition changed by the program kept");
      free(g);
      MPI_Request_free(&preq[0]);
      MPI_Request_free(&preq[1]);
      MPI_Type_free(&down);
    }
#endif
    /* a device call the staging refuses (on an intercommunicator): an MPI error naming the call, and the
     * same failure again and again keeps its one code (MPI has a few thousand) */
    if (n >= 2) {
      MPI_Comm half, inter;
      MPI_Comm_split(MPI_COMM_WORLD, r % 2, r, &half);
      MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, r % 2 ? 0 : 1, 99, &inter);
      MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
      rc_ = MPI_Send(rs, N, MPI_INT, 0, 14, inter);
      MPI_Error_string(rc_, text, &len);
      check(rc_ != MPI_SUCCESS && strstr(text, "MPI_Send") && strstr(text, "mpigpu"),
            "a device Send on an intercommunicator refused");
      int same_code = 1;
      for (int i = 0; i < 3000; i++) same_code &= MPI_Send(rs, N, MPI_INT, 0, 14, inter) == rc_;
      check(same_code, "the same refusal, 3000 times: one code");
      MPI_Comm_free(&inter);
      MPI_Comm_free(&half);
    }
    /* one-sided calls with device buffers and no handler: their host copies held to the synchronization
     * that completes them (MPI_Win_fence, MPI_Win_unlock), which copies a Get's result back; a request-based
     * one's held to its request's completion (MPI_Wait) */
    int *base = NULL;
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)(N * sizeof(int)), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    MPI_Errhandler eh;
    MPI_Win_create_errhandler(on_window_error, &eh);
    MPI_Win_set_errhandler(win, eh);
    for (int i = 0; i < N; i++) base[i] = -1;
    MPI_Win_fence(0, win);
    int *h0 = malloc(N * sizeof(int));
    for (int i = 0; i < N; i++) h0[i] = 10 * r + i;
    int *dp = dints(N, h0);
    check(MPI_Put(dp, N, MPI_INT, (r + 1) % n, 0, N, MPI_INT, win) == MPI_SUCCESS, "Put from device memory");
    put(dp, base, N * sizeof(int)); /* (the origin rewritten before the fence: the held copy is what MPI reads) */
    MPI_Win_fence(0, win);
    ok = 1;
    for (int i = 0; i < N; i++) ok &= base[i] == 10 * ((r + n - 1) % n) + i;
    check(ok, "Put from device memory, at the target after the fence");
    int *dg = dints(N, NULL);
    check(MPI_Get(dg, N, MPI_INT, (r + 1) % n, 0, N, MPI_INT, win) == MPI_SUCCESS, "Get into device memory");
    MPI_Win_fence(0, win);
    g = host_of(dg, N), ok = 1;
    for (int i = 0; i < N; i++) ok &= g[i] == 10 * r + i; /* rank r + 1's window holds rank r's Put */
    check(ok, "Get into device memory, after the fence");
    free(g);
    int *d1 = dints(1, NULL);
    MPI_Win_lock(MPI_LOCK_SHARED, (r + 1) % n, 0, win);
    check(MPI_Get(d1, 1, MPI_INT, (r + 1) % n, 3, 1, MPI_INT, win) == MPI_SUCCESS, "Get in a lock epoch");
    MPI_Win_unlock((r + 1) % n, win);
    g = host_of(d1, 1);
    check(g[0] == 10 * r + 3, "Get completed by MPI_Win_unlock");
    free(g);
    MPI_Request rq;
    MPI_Win_lock_all(0, win);
    check(MPI_Rget(d1, 1, MPI_INT, (r + 1) % n, 5, 1, MPI_INT, win, &rq) == MPI_SUCCESS, "Rget into device memory");
    check(MPI_Wait(&rq, MPI_STATUS_IGNORE) == MPI_SUCCESS, "Rget's Wait");
    g = host_of(d1, 1);
    check(g[0] == 10 * r + 5, "Rget into device memory, after MPI_Wait");
    free(g);
    check(MPI_Rget(d1, 1, MPI_INT, (r + 1) % n, 7, 1, MPI_INT, win, &rq) == MPI_SUCCESS, "Rget, then a flush");
    MPI_Win_flush((r + 1) % n, win);
    g = host_of(d1, 1);
    check(g[0] == 10 * r + 7, "Rget into device memory, after MPI_Win_flush (before its Wait)");
    free(g);
    put(d1, h, sizeof(int)); /* (the buffer is the program's again after the flush: Wait copies nothing back) */
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    g = host_of(d1, 1);
    check(g[0] == h[0], "Rget's Wait after the flush leaves the buffer alone");
    free(g);
    check(MPI_Rput(d1, 1, MPI_INT, (r + 1) % n, 6, 1, MPI_INT, win, &rq) == MPI_SUCCESS, "Rput from device memory");
    check(MPI_Wait(&rq, MPI_STATUS_IGNORE) == MPI_SUCCESS, "Rput's Wait");
    MPI_Win_unlock_all(win);
    check(window_errors == 0, "no call through the window's error handler");
    free(h0);
    MPI_Barrier(MPI_COMM_WORLD); /* every passive-target epoch over before the next fence epoch */
    MPI_Win_fence(0, win);
    int *hs = malloc(N * sizeof(int));
    for (int i = 0; i < N; i++) hs[i] = 100 * r + i;
    check(MPI_Put(hs, N, MPI_INT, (r + 1) % n, 0, N, MPI_INT, win) == MPI_SUCCESS, "Put from host memory");
    MPI_Win_fence(0, win);
    ok = 1;
    for (int i = 0; i < N; i++) ok &= base[i] == 100 * ((r + n - 1) % n) + i;
    check(ok, "Put from host memory, at the target");
    free(hs);
    MPI_Win_free(&win);
    MPI_Errhandler_free(&eh);
  }

  int all_failed = 0;
  MPI_Allreduce(&failed, &all_failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (r == 0) printf("device_calls: %d checks on rank 0, %d failed on all ranks\n", checks, all_failed);
  MPI_Finalize();
  return all_failed ? 1 : 0;
}
