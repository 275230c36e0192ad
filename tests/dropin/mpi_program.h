/* The parts of the drop-in test program (mpi_program.c, mpi_program_more.c, mpi_program_types.c). */
#ifndef SNCL_TESTS_DROPIN_MPI_PROGRAM_H_
#define SNCL_TESTS_DROPIN_MPI_PROGRAM_H_

#include <mpi.h>
#include <stddef.h>

/* Keeps a digest of buf[0..bytes) under name (which must outlive the program's end). */
void record(const char* name, const void* buf, size_t bytes);
/* The v-forms, prefix reductions, gather/scatter at every root, bitwise ops, contiguous
 * derived types, and the nonblocking form of every served call; counts drawn from seed. */
void more(MPI_Comm comm, unsigned seed);

/* Ranks passing different but matching datatypes (vector vs contiguous, struct vs basic,
 * zero-size types vs zero counts) to the same collectives. */
void mixedTypes(MPI_Comm comm);

/* A non-commutative user op (2x2 matrix products) through every reduction, and MINLOC on
 * a pair type: served by the drop-in's callback reduction, in MPI's rank order. */
void userOps(MPI_Comm comm);

#endif
