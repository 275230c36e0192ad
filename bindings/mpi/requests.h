// Nonblocking served calls: each is an MPI generalized request (MPI_Grequest_start) paired
// with an snclEvent recorded after the call on its communicator's stream. MPI cannot see
// sncl's progress, so the Wait and Test families and MPI_Request_free / get_status are
// intercepted: before handing the array to PMPI they complete (MPI_Grequest_complete) the
// requests of ours whose event is done (Wait*: after waiting for the events as needed).
#pragma once

#include <mpi.h>

#include <memory>

#include "bindings/mpi/common.h"

namespace sncl_mpi {

// *req becomes the request of a call just queued on t.stream; job lives until the request
// is freed (the buffers the queued call uses).
int startRequest(Kind k, MPI_Comm comm, const Target& t, std::unique_ptr<Job> job, MPI_Request* req);

// Waits for and completes every request of ours on stream (before the stream goes away).
void completeAllOn(snclStream_t stream);

}  // namespace sncl_mpi
