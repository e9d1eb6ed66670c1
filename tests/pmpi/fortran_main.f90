! The program form of fortran_calls.f90 (linked with it).
program fortran_main
  implicit none
  interface
    subroutine fortran_calls_run() bind(C, name='fortran_calls_run')
    end subroutine
  end interface
  call fortran_calls_run()
end program
