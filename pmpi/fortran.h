/* Fortran's bindings of the buffer-taking functions (fortran.c; the wrappers are generated into
 * fortran_wrappers.c by pmpi/generate.py). A Fortran program's MPI_ALLREDUCE reaches the library's
 * Fortran binding, which calls its C PMPI_Allreduce, not the MPI_Allreduce the interposer defines: device
 * memory from a Fortran code (CUDA Fortran's device arrays, OpenACC's host_data) would reach the library.
 * The interposer defines mpi_allreduce_ & co. itself (and Open MPI's ompi_allreduce_f, which its mpi_f08
 * bindings call): a call the library would make as it is goes to the
 * library's own binding (the next definition of the name); one with device memory, or any in a process
 * with a handler (the ranks of a call agree on its path there), is converted to C's parameters (handles
 * through the library's f2c functions, Fortran's MPI_IN_PLACE and MPI_BOTTOM to C's) and routed as the C
 * call would be. Fortran's INTEGER is taken to be C's int (4 bytes, the compilers' default; a code
 * built with -fdefault-integer-8 is not served). */
#pragma once
#include <stdint.h>
#include "functions.h"

/* What a Fortran binding's parameter is (every one passed by reference) */
enum { MGI_FK_BUFFER, MGI_FK_INT, MGI_FK_INTS, MGI_FK_TYPE, MGI_FK_OP, MGI_FK_COMM, MGI_FK_STATUS, MGI_FK_REQUEST,
       MGI_FK_INFO, MGI_FK_TYPES };

/* 1 where the library makes the call as it is: no handler takes it and no buffer is device memory. */
int mgi_fortran_library_makes(int id, void *const *f, const void *caller);
/* The library's own binding of `symbol` (the next definition in the global scope, or in the calling
 * object's scope), kept in *slot once found; NULL: none found (the call is converted instead). */
void *mgi_fortran_next(_Atomic(void *) *slot, const char *symbol, const void *caller);
/* The call converted to C's parameters and routed as the C call is: its MPI error code (ierr). */
int mgi_fortran_call(int id, const unsigned char *kinds, void *const *f, const void *caller);

/* What a Fortran request call's parameter is (MPI_WAIT & co., every one by reference): a count; requests
 * (one or an array); one request the C call takes by value; the flag, index, outcount and indices it
 * writes; a status or an array of them. */
enum { MGI_FR_COUNT, MGI_FR_REQUESTS, MGI_FR_REQVAL, MGI_FR_FLAG, MGI_FR_INDEX, MGI_FR_OUTCOUNT, MGI_FR_INDICES,
       MGI_FR_STATUS, MGI_FR_STATUSES };
/* Request call `id` (mgi_request_calls) converted to C's parameters and made as the C call is made while
 * requests hold host copies (staged_requests.c: a program without a handler, whose Fortran MPI_WAIT would
 * otherwise be the library's binding, which copies nothing back, and whose MPI_START would start a
 * persistent request without copying its device buffer in); its MPI error code (ierr). */
int mgi_fortran_request_call(int id, const unsigned char *roles, void *const *f);
