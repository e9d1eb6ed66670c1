! A Fortran program that passes device memory (cuMemAlloc, through the driver's C ABI) to MPI's Fortran
! bindings, as a CUDA Fortran or OpenACC code written for a CUDA-aware MPI does, and checks MPI's
! results: run under the interposer (LD_PRELOAD=$(python -m mpigpu --pmpi-path)) on a real GPU or on the
! fake driver of the CPU tests (fake_libcuda.c), whose device memory nothing but its copies may touch.
! Host arrays go through the same calls. Prints one summary line on rank 0; stops with code 1 where a
! check failed. Built as a program (with fortran_main.f90) and as a shared library that a C program
! loads with RTLD_LOCAL, as Python loads an extension (fortran_host.c), its entry `fortran_calls_run`.
subroutine fortran_calls_run() bind(C, name='fortran_calls_run')
  use mpi
  use driver
  use checking
  implicit none
  integer :: rank, nranks, ierr, ierr2, dev, i, j, k, nxt, prv
  integer, parameter :: n = 5
  integer :: base(n), want(n), host(n), gathered_want(n * 8), want_ring(n), status(MPI_STATUS_SIZE), reqs(2)
  integer :: statuses(MPI_STATUS_SIZE, 2)
  integer, pointer, contiguous :: d_in(:), d_out(:), d_all(:)
  integer, allocatable :: got(:)
  type(c_ptr) :: ctx
  check_label = 'fortran_calls'

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  check_rank = rank
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  if (cuInit(0) /= 0 .or. cuDeviceGet(dev, 0) /= 0 .or. cuDevicePrimaryCtxRetain(ctx, dev) /= 0 &
      .or. cuCtxSetCurrent(ctx) /= 0) stop 2
  base = [(10 * rank + i, i = 1, n)]

  ! Allreduce, device to device
  d_in => dints(base)
  nxt = mod(rank + 1, nranks)
  prv = mod(rank - 1 + nranks, nranks)
  want_ring = [(10 * prv + i, i = 1, n)]
  d_out => dints([(0, i = 1, n)])
  call MPI_Allreduce(d_in, d_out, n, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  want = [(10 * nranks * (nranks - 1) / 2 + nranks * i, i = 1, n)]
  got = host_of(d_out)
  call check(ierr == MPI_SUCCESS .and. all(got == want), 'Allreduce, device buffers')

  ! Allreduce in place on a device buffer (Fortran's MPI_IN_PLACE)
  d_out => dints(base)
  call MPI_Allreduce(MPI_IN_PLACE, d_out, n, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD, ierr)
  got = host_of(d_out)
  call check(ierr == MPI_SUCCESS .and. all(got == [(10 * (nranks - 1) + i, i = 1, n)]), 'Allreduce in place')

  ! Bcast from the last rank
  d_out => dints(base)
  call MPI_Bcast(d_out, n, MPI_INTEGER, nranks - 1, MPI_COMM_WORLD, ierr)
  got = host_of(d_out)
  call check(ierr == MPI_SUCCESS .and. all(got == [(10 * (nranks - 1) + i, i = 1, n)]), 'Bcast')

  ! Allgather into device memory from a host buffer (mixed on one rank)
  d_all => dints([(0, i = 1, n * nranks)])
  call MPI_Allgather(base, n, MPI_INTEGER, d_all, n, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  gathered_want = 0
  do k = 0, nranks - 1
    gathered_want(k * n + 1:(k + 1) * n) = [(10 * k + i, i = 1, n)]
  end do
  got = host_of(d_all)
  call check(ierr == MPI_SUCCESS .and. all(got == gathered_want(1:n * nranks)), 'Allgather')

  ! around the ring: Send from device memory into device memory (Recv with a status), then into host
  ! memory (the library's own binding receives), then Sendrecv device to device (MPI_STATUS_IGNORE)
  if (nranks > 1) then
    d_in => dints(base)
    d_out => dints([(0, i = 1, n)])
    call ring(d_in, d_out, MPI_ANY_SOURCE, 7, status)
    got = host_of(d_out)
    call MPI_Get_count(status, MPI_INTEGER, k, ierr2)
    call check(ierr == MPI_SUCCESS .and. all(got == want_ring) .and. status(MPI_SOURCE) == prv &
               .and. status(MPI_TAG) == 7 .and. k == n, 'Send and Recv, device memory, a status')
    call ring(d_in, host, prv, 9, MPI_STATUS_IGNORE)
    call check(ierr == MPI_SUCCESS .and. all(host == want_ring), 'Send into host memory')
    d_out => dints([(0, i = 1, n)])
    call MPI_Sendrecv(d_in, n, MPI_INTEGER, nxt, 8, d_out, n, MPI_INTEGER, prv, 8, MPI_COMM_WORLD, &
                      MPI_STATUS_IGNORE, ierr)
    got = host_of(d_out)
    ! (MPI_STATUS_IGNORE is a variable of the Fortran runtime: a status written there would change it)
    call check(ierr == MPI_SUCCESS .and. all(got == want_ring) .and. all(MPI_STATUS_IGNORE == 0), &
               'Sendrecv, device memory')
  end if

  ! non-blocking calls: host arrays through the library's own bindings (MPI_WAITALL completes them)
  if (nranks > 1) then
    host = 0
    call MPI_Irecv(host, n, MPI_INTEGER, prv, 11, MPI_COMM_WORLD, reqs(1), ierr)
    call MPI_Isend(base, n, MPI_INTEGER, nxt, 11, MPI_COMM_WORLD, reqs(2), ierr2)
    call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE, k)
    call check(ierr == MPI_SUCCESS .and. ierr2 == MPI_SUCCESS .and. k == MPI_SUCCESS .and. all(host == want_ring), &
               'Isend and Irecv, host arrays')
  end if
  ! non-blocking calls with device memory, in a program without Python: the library's call on host copies,
  ! held until MPI_WAIT & co. (the interposer's while copies are held) copy back what MPI wrote
  d_in => dints(base)
  d_out => dints([(0, i = 1, n)])
  call MPI_Iallreduce(d_in, d_out, n, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Wait(reqs(1), MPI_STATUS_IGNORE, ierr2)
  got = host_of(d_out)
  call check(ierr == MPI_SUCCESS .and. ierr2 == MPI_SUCCESS .and. reqs(1) == MPI_REQUEST_NULL .and. &
             all(got == want), 'Iallreduce of device memory, MPI_WAIT')
  block
    ! a ring of Isend and Irecv of device memory (to itself on one rank): MPI_WAITANY (Fortran's index
    ! from 1), then MPI_WAITALL with statuses
    d_out => dints([(0, i = 1, n)])
    call MPI_Irecv(d_out, n, MPI_INTEGER, MPI_ANY_SOURCE, 12, MPI_COMM_WORLD, reqs(1), ierr)
    call MPI_Barrier(MPI_COMM_WORLD, k)  ! (no message sent before every receive is posted: it is held)
    call MPI_Isend(d_in, n, MPI_INTEGER, nxt, 12, MPI_COMM_WORLD, reqs(2), ierr2)
    call MPI_Waitany(2, reqs, j, status, k)
    call check(ierr == MPI_SUCCESS .and. ierr2 == MPI_SUCCESS .and. k == MPI_SUCCESS .and. (j == 1 .or. j == 2) &
               .and. reqs(j) == MPI_REQUEST_NULL, 'Isend and Irecv of device memory, MPI_WAITANY')
    call MPI_Waitall(2, reqs, statuses, k)
    if (j == 1) statuses(:, 1) = status  ! (the receive's, from MPI_WAITANY: MPI_WAITALL's is empty then)
    got = host_of(d_out)
    call check(k == MPI_SUCCESS .and. all(reqs == MPI_REQUEST_NULL) .and. all(got == want_ring) .and. &
               statuses(MPI_SOURCE, 1) == prv .and. statuses(MPI_TAG, 1) == 12, &
               'Isend and Irecv of device memory, MPI_WAITALL, the receive''s status')
  end block

  block
    ! persistent requests of device memory, in a program without Python: MPI_SEND_INIT and MPI_RECV_INIT
    ! around the ring, each round's send buffer rewritten on the device before MPI_STARTALL (round 1) or
    ! MPI_START of each (round 2), so a start must copy the buffer in anew; MPI_WAITALL copies back; then
    ! MPI_REQUEST_FREE
    integer :: preqs(2), round
    d_out => dints([(0, i = 1, n)])
    call MPI_Recv_init(d_out, n, MPI_INTEGER, prv, 13, MPI_COMM_WORLD, preqs(1), ierr)
    call MPI_Send_init(d_in, n, MPI_INTEGER, nxt, 13, MPI_COMM_WORLD, preqs(2), ierr2)
    call check(ierr == MPI_SUCCESS .and. ierr2 == MPI_SUCCESS .and. all(preqs /= MPI_REQUEST_NULL), &
               'Send_init and Recv_init of device memory')
    do round = 1, 2
      call set_dints(d_in, base + 100 * round)
      call set_dints(d_out, [(0, i = 1, n)])
      call MPI_Barrier(MPI_COMM_WORLD, k)  ! (the peer's previous round read its receive buffer)
      if (round == 1) then
        call MPI_Startall(2, preqs, ierr)
      else
        call MPI_Start(preqs(1), ierr)
        call MPI_Start(preqs(2), ierr2)
      end if
      call MPI_Waitall(2, preqs, MPI_STATUSES_IGNORE, k)
      got = host_of(d_out)
      call check(ierr == MPI_SUCCESS .and. ierr2 == MPI_SUCCESS .and. k == MPI_SUCCESS .and. &
                 all(preqs /= MPI_REQUEST_NULL) .and. all(got == want_ring + 100 * round), &
                 'persistent Send and Recv of device memory, MPI_START(ALL), a round')
    end do
    call MPI_Request_free(preqs(1), ierr)
    call MPI_Request_free(preqs(2), ierr2)
    call check(ierr == MPI_SUCCESS .and. ierr2 == MPI_SUCCESS .and. all(preqs == MPI_REQUEST_NULL), &
               'MPI_REQUEST_FREE of persistent requests')
  end block

  block
    ! MPI_ALLTOALLW of device memory (an array of datatypes, converted for the C call): p + 1 integers to
    ! rank p from byte displacement 4 p (p + 1) / 2, rank + 1 integers from each rank
    integer, allocatable :: sc(:), sd(:), rcs(:), rds(:), wt(:), wvals(:), wgot(:)
    integer, pointer, contiguous :: d_ws(:), d_wr(:)
    integer :: p, at
    allocate(sc(nranks), sd(nranks), rcs(nranks), rds(nranks), wt(nranks), wvals(nranks * (nranks + 1) / 2))
    at = 0
    do p = 0, nranks - 1
      sc(p + 1) = p + 1
      sd(p + 1) = 4 * at
      rcs(p + 1) = rank + 1
      rds(p + 1) = 4 * p * (rank + 1)
      wt(p + 1) = MPI_INTEGER
      wvals(at + 1:at + p + 1) = [(1000 * rank + 10 * p + k, k = 0, p)]
      at = at + p + 1
    end do
    d_ws => dints(wvals)
    d_wr => dints([(0, i = 1, nranks * (rank + 1))])
    call MPI_Alltoallw(d_ws, sc, sd, wt, d_wr, rcs, rds, wt, MPI_COMM_WORLD, ierr)
    wgot = host_of(d_wr)
    call check(ierr == MPI_SUCCESS .and. all(wgot == [((1000 * p + 10 * rank + k, k = 0, rank), p = 0, nranks - 1)]), &
               'Alltoallw of device memory')
    ! in place: two integers with each rank, the send arrays one-element dummies (MPI ignores them)
    rcs = 2
    rds = [(8 * p, p = 0, nranks - 1)]
    d_wr => dints([(100 * rank + p, 100 * rank + p + 50, p = 0, nranks - 1)])
    call MPI_Alltoallw(MPI_IN_PLACE, sc(1:1), sd(1:1), wt(1:1), d_wr, rcs, rds, wt, MPI_COMM_WORLD, ierr)
    wgot = host_of(d_wr)
    call check(ierr == MPI_SUCCESS .and. all(wgot == [(100 * p + rank, 100 * p + rank + 50, p = 0, nranks - 1)]), &
               'Alltoallw in place on device memory')
    ! MPI_IALLTOALLW of device memory: the datatypes' array converted for the C call lives until the request
    ! is done (MPI reads it until then); another call in between
    rcs = rank + 1
    rds = [(4 * p * (rank + 1), p = 0, nranks - 1)]
    d_ws => dints(wvals)
    d_wr => dints([(0, i = 1, nranks * (rank + 1))])
    call MPI_Ialltoallw(d_ws, sc, sd, wt, d_wr, rcs, rds, wt, MPI_COMM_WORLD, reqs(1), ierr)
    call MPI_Allreduce(MPI_IN_PLACE, at, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, j)
    call MPI_Wait(reqs(1), status, ierr2)
    wgot = host_of(d_wr)
    call check(ierr == MPI_SUCCESS .and. j == MPI_SUCCESS .and. ierr2 == MPI_SUCCESS .and. &
               reqs(1) == MPI_REQUEST_NULL .and. &
               all(wgot == [((1000 * p + 10 * rank + k, k = 0, rank), p = 0, nranks - 1)]), &
               'Ialltoallw of device memory, then MPI_Wait')
  end block

  ! host arrays: the library's own binding makes the call
  host = base
  call MPI_Allreduce(MPI_IN_PLACE, host, n, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  call check(ierr == MPI_SUCCESS .and. all(host == want), 'Allreduce, host arrays')

  call MPI_Allreduce(MPI_IN_PLACE, failed, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(a, i0, a, i0, a, i0, a)', 'fortran_calls: ', nranks, ' ranks, ', checks, ' checks, ', &
      failed, ' failed on all ranks'
  call MPI_Finalize(ierr)
  if (failed /= 0) stop 1
contains
  ! n integers of sbuf to the next rank, received into rbuf from `source` (even ranks send first); the
  ! buffers by address (device memory is never copied in or out), ierr the last call's
  subroutine ring(sbuf, rbuf, source, tag, stat)
    integer :: sbuf(*), rbuf(*)
    integer, intent(in) :: source, tag
    integer :: stat(MPI_STATUS_SIZE)
    if (mod(rank, 2) == 0) then
      call MPI_Send(sbuf, n, MPI_INTEGER, nxt, tag, MPI_COMM_WORLD, ierr)
      call MPI_Recv(rbuf, n, MPI_INTEGER, source, tag, MPI_COMM_WORLD, stat, ierr)
    else
      call MPI_Recv(rbuf, n, MPI_INTEGER, source, tag, MPI_COMM_WORLD, stat, ierr)
      call MPI_Send(sbuf, n, MPI_INTEGER, nxt, tag, MPI_COMM_WORLD, ierr)
    end if
  end subroutine
end subroutine
