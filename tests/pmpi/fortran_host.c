/* A C program that loads the interposer into its global scope and a Fortran library (fortran_calls.f90
 * built as a shared library) with RTLD_LOCAL, as Python loads the interposer and an extension or f2py
 * module: the library's MPI library and its Fortran runtime are then in its own scope only, where the
 * interposer's Fortran bindings must find them. usage: fortran_host interposer.so libfortran_calls.so */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
  if (argc != 3) return 2;
  if (!dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL)) {
    fprintf(stderr, "fortran_host: %s\n", dlerror());
    return 2;
  }
  void *lib = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  void (*run)(void) = lib ? (void (*)(void))dlsym(lib, "fortran_calls_run") : NULL;
  if (!run) {
    fprintf(stderr, "fortran_host: %s\n", dlerror());
    return 2;
  }
  run();
  return 0;
}
