! What the Fortran test programs (fortran_calls.f90, fortran_f08_calls.f90) share: the CUDA driver's C ABI
! (the fake driver of the CPU tests, fake_libcuda.c, or a real one) with device memory as Fortran arrays
! over it, and their checks' count.
module driver
  use iso_c_binding
  implicit none
  interface
    integer(c_int) function cuInit(flags) bind(C, name='cuInit')
      import :: c_int
      integer(c_int), value :: flags
    end function
    integer(c_int) function cuDeviceGet(dev, ordinal) bind(C, name='cuDeviceGet')
      import :: c_int
      integer(c_int) :: dev
      integer(c_int), value :: ordinal
    end function
    integer(c_int) function cuDevicePrimaryCtxRetain(ctx, dev) bind(C, name='cuDevicePrimaryCtxRetain')
      import :: c_int, c_ptr
      type(c_ptr) :: ctx
      integer(c_int), value :: dev
    end function
    integer(c_int) function cuCtxSetCurrent(ctx) bind(C, name='cuCtxSetCurrent')
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
    end function
    integer(c_int) function cuMemAlloc(dptr, bytes) bind(C, name='cuMemAlloc_v2')
      import :: c_int, c_intptr_t, c_size_t
      integer(c_intptr_t) :: dptr
      integer(c_size_t), value :: bytes
    end function
    integer(c_int) function cuMemcpyHtoD(dst, src, bytes) bind(C, name='cuMemcpyHtoD_v2')
      import :: c_int, c_intptr_t, c_ptr, c_size_t
      integer(c_intptr_t), value :: dst
      type(c_ptr), value :: src
      integer(c_size_t), value :: bytes
    end function
    integer(c_int) function cuMemcpyDtoH(dst, src, bytes) bind(C, name='cuMemcpyDtoH_v2')
      import :: c_int, c_intptr_t, c_ptr, c_size_t
      type(c_ptr), value :: dst
      integer(c_intptr_t), value :: src
      integer(c_size_t), value :: bytes
    end function
  end interface
contains
  ! n integers of device memory holding values, as a Fortran array over the device address
  function dints(values) result(d)
    integer, intent(in), target :: values(:)
    integer, pointer, contiguous :: d(:)
    integer(c_intptr_t) :: at
    integer(c_size_t) :: bytes
    bytes = int(size(values), c_size_t) * 4_c_size_t
    if (cuMemAlloc(at, max(bytes, 4_c_size_t)) /= 0) stop 2
    if (cuMemcpyHtoD(at, c_loc(values), bytes) /= 0) stop 2
    call c_f_pointer(transfer(at, c_null_ptr), d, [size(values)])
  end function

  ! values written into the device memory of d (as many as d holds)
  subroutine set_dints(d, values)
    integer, pointer, contiguous, intent(in) :: d(:)
    integer, intent(in), target :: values(:)
    if (cuMemcpyHtoD(transfer(c_loc(d), 0_c_intptr_t), c_loc(values), int(size(d), c_size_t) * 4_c_size_t) /= 0) stop 2
  end subroutine

  ! the values of n integers of device memory
  function host_of(d) result(h)
    integer, pointer, contiguous, intent(in) :: d(:)
    integer, allocatable, target :: h(:)
    allocate(h(size(d)))
    if (cuMemcpyDtoH(c_loc(h), transfer(c_loc(d), 0_c_intptr_t), int(size(d), c_size_t) * 4_c_size_t) /= 0) stop 2
  end function
end module

module checking
  implicit none
  integer :: checks = 0, failed = 0
  integer :: check_rank = -1          ! the program's rank, named in a failure's line
  character(len=32) :: check_label = ''  ! the program's name, beginning each line
contains
  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(*), intent(in) :: what
    checks = checks + 1
    if (.not. ok) then
      failed = failed + 1
      print '(a, a, a, a, i0)', trim(check_label), ': FAIL ', what, ' on rank ', check_rank
    end if
  end subroutine
end module
