! A Fortran program written with `use mpi_f08` that passes device memory (cuMemAlloc through
! fortran_driver.f90) to MPI, as fortran_calls.f90 does with `use mpi`: Open MPI's mpi_f08 bindings call
! its ompi_<name>_f entries, which the interposer defines too. Checks MPI's results; prints one summary
! line on rank 0; stops with code 1 where a check failed.
program fortran_f08_calls
  use mpi_f08
  use driver
  use checking
  implicit none
  integer :: rank, nranks, dev, i, k, nxt, prv
  logical :: flag
  integer, parameter :: n = 4
  integer :: base(n), want_ring(n), host(n)
  integer, pointer, contiguous :: d_in(:), d_out(:)
  integer, allocatable :: got(:)
  type(MPI_Status) :: status
  type(MPI_Request) :: reqs(2)
  type(c_ptr) :: ctx
  check_label = 'fortran_f08_calls'

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  check_rank = rank
  call MPI_Comm_size(MPI_COMM_WORLD, nranks)
  if (cuInit(0) /= 0 .or. cuDeviceGet(dev, 0) /= 0 .or. cuDevicePrimaryCtxRetain(ctx, dev) /= 0 &
      .or. cuCtxSetCurrent(ctx) /= 0) stop 2
  base = [(100 * rank + i, i = 1, n)]
  nxt = mod(rank + 1, nranks)
  prv = mod(rank - 1 + nranks, nranks)
  want_ring = [(100 * prv + i, i = 1, n)]

  ! Allreduce in place on device memory
  d_out => dints(base)
  call MPI_Allreduce(MPI_IN_PLACE, d_out, n, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  got = host_of(d_out)
  call check(all(got == [(100 * nranks * (nranks - 1) / 2 + nranks * i, i = 1, n)]), 'Allreduce in place')

  ! Bcast of device memory from the last rank
  d_out => dints(base)
  call MPI_Bcast(d_out, n, MPI_INTEGER, nranks - 1, MPI_COMM_WORLD)
  got = host_of(d_out)
  call check(all(got == [(100 * (nranks - 1) + i, i = 1, n)]), 'Bcast')

  if (nranks > 1) then
    ! Send and Recv of device memory around the ring, with a status
    d_in => dints(base)
    d_out => dints([(0, i = 1, n)])
    if (mod(rank, 2) == 0) then
      call MPI_Send(d_in, n, MPI_INTEGER, nxt, 5, MPI_COMM_WORLD)
      call MPI_Recv(d_out, n, MPI_INTEGER, MPI_ANY_SOURCE, 5, MPI_COMM_WORLD, status)
    else
      call MPI_Recv(d_out, n, MPI_INTEGER, MPI_ANY_SOURCE, 5, MPI_COMM_WORLD, status)
      call MPI_Send(d_in, n, MPI_INTEGER, nxt, 5, MPI_COMM_WORLD)
    end if
    got = host_of(d_out)
    call MPI_Get_count(status, MPI_INTEGER, k)
    call check(all(got == want_ring) .and. status%MPI_SOURCE == prv .and. status%MPI_TAG == 5 .and. k == n, &
               'Send and Recv, a status')
    ! Isend and Irecv of host arrays (the library's own binding), completed by MPI_Waitall
    host = 0
    call MPI_Irecv(host, n, MPI_INTEGER, prv, 6, MPI_COMM_WORLD, reqs(1))
    call MPI_Isend(base, n, MPI_INTEGER, nxt, 6, MPI_COMM_WORLD, reqs(2))
    call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE)
    call check(all(host == want_ring), 'Isend and Irecv, host arrays')
    ! the same of device memory: host copies held until MPI_Waitall (the interposer's ompi_waitall_f)
    d_out => dints([(0, i = 1, n)])
    call MPI_Irecv(d_out, n, MPI_INTEGER, prv, 7, MPI_COMM_WORLD, reqs(1))
    call MPI_Barrier(MPI_COMM_WORLD)  ! (no message sent before every receive is posted: it is held)
    call MPI_Isend(d_in, n, MPI_INTEGER, nxt, 7, MPI_COMM_WORLD, reqs(2))
    call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE)
    got = host_of(d_out)
    call check(all(got == want_ring) .and. all(reqs == MPI_REQUEST_NULL), 'Isend and Irecv, device memory')
    ! a held receive of device memory completed by polling MPI_Test (Open MPI's mpi_f08 calls pmpi_test_)
    d_out => dints([(0, i = 1, n)])
    call MPI_Irecv(d_out, n, MPI_INTEGER, prv, 8, MPI_COMM_WORLD, reqs(1))
    call MPI_Barrier(MPI_COMM_WORLD)
    call MPI_Isend(d_in, n, MPI_INTEGER, nxt, 8, MPI_COMM_WORLD, reqs(2))
    flag = .false.
    do while (.not. flag)
      call MPI_Test(reqs(1), flag, status)
    end do
    call MPI_Wait(reqs(2), MPI_STATUS_IGNORE)
    got = host_of(d_out)
    call check(all(got == want_ring) .and. status%MPI_SOURCE == prv .and. reqs(1) == MPI_REQUEST_NULL, &
               'Irecv of device memory, MPI_Test')
    ! persistent requests of device memory (Open MPI's mpi_f08 calls ompi_send_init_f, ompi_startall_f):
    ! the send buffer rewritten on the device before MPI_Startall, so the start copies it in anew
    d_out => dints([(0, i = 1, n)])
    call MPI_Recv_init(d_out, n, MPI_INTEGER, prv, 9, MPI_COMM_WORLD, reqs(1))
    call MPI_Send_init(d_in, n, MPI_INTEGER, nxt, 9, MPI_COMM_WORLD, reqs(2))
    call set_dints(d_in, base + 1000)
    call MPI_Barrier(MPI_COMM_WORLD)
    call MPI_Startall(2, reqs)
    call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE)
    got = host_of(d_out)
    call MPI_Request_free(reqs(1))
    call MPI_Request_free(reqs(2))
    call check(all(got == want_ring + 1000) .and. all(reqs == MPI_REQUEST_NULL), &
               'Send_init and Recv_init of device memory, MPI_Startall')
  end if

  call MPI_Allreduce(MPI_IN_PLACE, failed, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  if (rank == 0) print '(a, i0, a, i0, a, i0, a)', 'fortran_f08_calls: ', nranks, ' ranks, ', checks, &
      ' checks, ', failed, ' failed on all ranks'
  call MPI_Finalize()
  if (failed /= 0) stop 1
end program
