// One sncl communicator per MPI intracommunicator, built lazily at the first collective
// sncl serves on it and destroyed when MPI frees the communicator (an attribute's delete
// callback) or at MPI_Finalize.
#pragma once

#include <mpi.h>

#include "sncl/sncl.h"

namespace sncl_mpi {

// The sncl comm for comm, or nullptr when sncl cannot serve it (intercommunicator, a
// failed init: every rank then agrees to fall back). Collective over comm on first use.
snclComm_t commFor(MPI_Comm comm);

// Destroys every sncl comm still alive; called by MPI_Finalize before PMPI_Finalize.
void destroyAll();

}  // namespace sncl_mpi
