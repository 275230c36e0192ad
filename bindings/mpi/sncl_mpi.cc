// libsncl_mpi.so: PMPI interposition. Preloaded into an unmodified MPI program, it serves
// MPI's collectives on intracommunicators through sncl (colls.cc, vcolls.cc), blocking and
// nonblocking (requests.cc): buffers with gaps packed around the call (staging.cc), ops and
// types sncl lacks by a callback reduction (callback_reduce.cc). It passes the calls it
// cannot serve (intercommunicators, erroneous arguments, callback reductions over 64 MiB)
// to the PMPI_* entry points unchanged.
//
// Every decision depends only on arguments MPI requires to match across ranks (the type
// signature's size and predefined type, op, root), never on a rank's own layout, so all
// ranks of a collective take the same path.
//
// SNCL_MPI_DEBUG=1: each reason for a fallback once, and at MPI_Finalize per call kind how
// many calls went to sncl and to MPI and the share served. SNCL_MPI_DEBUG=2: one line per call.
#include <mpi.h>

#include "bindings/mpi/comm_cache.h"
#include "bindings/mpi/common.h"

using namespace sncl_mpi;

extern "C" {

// Collective over comm (MPI-3.1 6.4.3): every member releases the sncl comm here, after a
// barrier, before MPI frees the communicator.
int MPI_Comm_free(MPI_Comm* comm) {
  int init = 0, fin = 0;
  PMPI_Initialized(&init);
  PMPI_Finalized(&fin);
  if (comm && init && !fin) releaseComm(*comm);
  return PMPI_Comm_free(comm);
}

int MPI_Finalize(void) {
  sncl_mpi::noteFinalize();
  sncl_mpi::destroyAll();
  if (debugLevel() >= 1) {
    printCounts();
    printCommCounts(worldRank());
  }
  return PMPI_Finalize();
}

}  // extern "C"
