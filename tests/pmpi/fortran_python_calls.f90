! Fortran MPI calls that a Python process makes through a Fortran extension (as f2py builds one, loaded
! with RTLD_LOCAL): bind(C) subroutines over arrays Python passes by address, host or device memory alike.
! Under `python -m mpigpu` the interposer's Fortran bindings convert every call to C's and hand it to
! mpigpu's handler, and its Fortran MPI_START and MPI_WAITALL reach the persistent requests' proxies.
! tests/mpi/pmpi_fortran_python.py drives them.
module fortran_python_calls
  use iso_c_binding
  use mpi
  implicit none
contains
  ! MPI_ALLREDUCE (sum) of n integers
  subroutine f_allreduce(sbuf, rbuf, n, ierr) bind(C, name='f_allreduce')
    integer(c_int), intent(in), value :: n
    integer(c_int) :: sbuf(n), rbuf(n), ierr
    call MPI_Allreduce(sbuf, rbuf, n, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  end subroutine

  ! persistent MPI_SEND_INIT and MPI_RECV_INIT of n integers around the ring, `rounds` rounds: before
  ! round k the send buffer holds base + k (written here, between the rounds); MPI_STARTALL, MPI_WAITALL;
  ! each round's receive summed into total; MPI_REQUEST_FREE; ierr the first error
  subroutine f_ring_persistent(sbuf, rbuf, n, rounds, base, total, ierr) bind(C, name='f_ring_persistent')
    integer(c_int), intent(in), value :: n, rounds, base
    integer(c_int) :: sbuf(n), rbuf(n), total(n), ierr
    integer :: reqs(2), rank, nranks, k, e(6)
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, e(1))
    call MPI_Comm_size(MPI_COMM_WORLD, nranks, e(1))
    call MPI_Recv_init(rbuf, n, MPI_INTEGER, mod(rank - 1 + nranks, nranks), 21, MPI_COMM_WORLD, reqs(1), e(1))
    call MPI_Send_init(sbuf, n, MPI_INTEGER, mod(rank + 1, nranks), 21, MPI_COMM_WORLD, reqs(2), e(2))
    total = 0
    e(3:5) = MPI_SUCCESS
    do k = 1, rounds
      sbuf = base + k
      call MPI_Barrier(MPI_COMM_WORLD, e(6))  ! (the previous round's receive read before the send changes)
      call MPI_Startall(2, reqs, e(3))
      call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE, e(4))
      total = total + rbuf
    end do
    call MPI_Request_free(reqs(1), e(5))
    call MPI_Request_free(reqs(2), e(6))
    ierr = maxval(abs(e))
    if (reqs(1) /= MPI_REQUEST_NULL .or. reqs(2) /= MPI_REQUEST_NULL) ierr = -1
  end subroutine

  ! MPI_ISEND and MPI_IRECV of n integers around the ring, completed by MPI_WAITALL
  subroutine f_ring_nonblocking(sbuf, rbuf, n, ierr) bind(C, name='f_ring_nonblocking')
    integer(c_int), intent(in), value :: n
    integer(c_int) :: sbuf(n), rbuf(n), ierr
    integer :: reqs(2), rank, nranks, e(3)
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, e(1))
    call MPI_Comm_size(MPI_COMM_WORLD, nranks, e(1))
    call MPI_Irecv(rbuf, n, MPI_INTEGER, mod(rank - 1 + nranks, nranks), 22, MPI_COMM_WORLD, reqs(1), e(1))
    call MPI_Isend(sbuf, n, MPI_INTEGER, mod(rank + 1, nranks), 22, MPI_COMM_WORLD, reqs(2), e(2))
    call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE, e(3))
    ierr = maxval(abs(e))
  end subroutine
end module
