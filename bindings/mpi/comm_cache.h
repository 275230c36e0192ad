// One sncl communicator and one sncl stream per MPI intracommunicator, built lazily at the
// first collective sncl serves on it and cached in an MPI attribute. The attribute is not
// copied by MPI_Comm_dup (MPI_COMM_NULL_COPY_FN), so a duplicate gets a comm of its own;
// MPI_Comm_split and MPI_Comm_create make new communicators without it.
//
// Teardown: MPI_Comm_free (intercepted) and MPI_Finalize release the sncl comm after
// completing its outstanding requests and a PMPI_Barrier on the communicator, so that no
// rank closes its connections while a peer still uses them (which a peer reports as a
// remote error). MPI_Finalize releases in the reverse of an order all ranks agree on (see
// comm_cache.cc), so those barriers cannot wait for each other in a cycle.
#pragma once

#include <mpi.h>

#include "bindings/mpi/common.h"
#include "sncl/sncl.h"

namespace sncl_mpi {

// commFor (common.h): the sncl comm, stream and queue mark for comm, from the thread's
// memo or else built here (commLookup).

// Before PMPI_Comm_free(comm): completes comm's requests, waits for its stream, meets the
// other ranks in a PMPI_Barrier and destroys the sncl comm and stream.
void releaseComm(MPI_Comm comm);

// Releases every sncl comm still alive; called by MPI_Finalize before PMPI_Finalize.
void destroyAll();

// SNCL_MPI_DEBUG=1 at MPI_Finalize: sncl comms built, and released at MPI_Comm_free, at
// MPI_Finalize, or by MPI otherwise (an attribute deleted without our MPI_Comm_free).
void printCommCounts(int worldRank);

}  // namespace sncl_mpi
