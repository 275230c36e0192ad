// Reductions sncl cannot compute itself (user-defined ops from MPI_Op_create, MINLOC and
// MAXLOC on pair types, predefined ops on types sncl lacks such as MPI_SHORT or long
// double) served anyway: sncl moves every rank's input (All-Gather, Gather or All-to-All,
// packed as bytes), and MPI_Reduce_local applies the op on the receiving rank, in rank
// order x0 op x1 op ... (MPI's order, which non-commutative ops need).
//
// Cost: each rank receives n inputs instead of a ring's two, so a call whose inputs over
// all ranks exceed kCallbackMaxBytes goes to MPI instead; the limit depends on the count,
// type signature and communicator size only, so every rank decides alike.
#pragma once

#include <mpi.h>

#include "bindings/mpi/common.h"

namespace sncl_mpi {

constexpr size_t kCallbackMaxBytes = size_t{64} << 20;

// reduction()'s answer (types.h), except that a reduction sncl lacks the op or type for
// but a callback reduction serves gives nullptr with *callback set (comm: whose ranks'
// inputs the callback gathers).
// reductionOrCallback once reduction() refused with why.
const char* callbackOr(const char* why, MPI_Datatype t, MPI_Op op, long count, MPI_Comm comm, bool* callback);
inline const char* reductionOrCallback(MPI_Datatype t, MPI_Op op, long count, MPI_Comm comm, Reduction* red,
                                       bool* callback) {
  *callback = false;
  const char* why = reduction(t, op, count, red);
  return why ? callbackOr(why, t, op, count, comm, callback) : nullptr;
}

int callbackAllreduce(Kind k, const void* sb, void* rb, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm,
                      const Target& target, MPI_Request* req);
int callbackReduce(Kind k, const void* sb, void* rb, int count, MPI_Datatype t, MPI_Op op, int root, MPI_Comm comm,
                   const Target& target, MPI_Request* req);
int callbackScan(Kind k, bool exclusive, const void* sb, void* rb, int count, MPI_Datatype t, MPI_Op op,
                 MPI_Comm comm, const Target& target, MPI_Request* req);
int callbackReduceScatterBlock(Kind k, const void* sb, void* rb, int count, MPI_Datatype t, MPI_Op op,
                               MPI_Comm comm, const Target& target, MPI_Request* req);
int callbackReduceScatter(Kind k, const void* sb, void* rb, const int* counts, MPI_Datatype t, MPI_Op op,
                          MPI_Comm comm, const Target& target, MPI_Request* req);

}  // namespace sncl_mpi
