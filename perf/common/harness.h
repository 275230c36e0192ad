// The shared harness of the *_perf benchmarks, in nccl-tests' style: flags, size sweep,
// timing, result checking, and MPI's matching collective on the same buffers beside sncl.
// Runs under mpirun (one rank per process, or -t threads per process) or standalone.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>

#include "sncl/sncl.h"

namespace perf {

struct Options {
  size_t minBytes = 8;
  size_t maxBytes = 64u << 20;
  size_t stepFactor = 2;
  int iters = 20;
  int warmup = 5;
  int check = 1;
  int threads = 1;  // ranks per process
  snclDataType_t dtype = snclFloat32;
  snclRedOp_t op = snclSum;
  bool baseline = true;  // MPI beside sncl
};

// What one benchmark measures: the collective, its bus-bandwidth factor, and the MPI peer.
struct Collective {
  const char* name;
  // Elements per rank for a size in bytes (the nccl-tests convention of the collective).
  size_t (*countFor)(size_t bytes, size_t elemSize, int nranks);
  double (*busFactor)(int nranks);
  snclResult_t (*run)(const void* in, void* out, size_t count, snclDataType_t type, snclRedOp_t op, snclComm_t comm);
  // MPI's call on the same buffers; -1 when MPI has no equivalent (then no baseline).
  int (*runMpi)(const void* in, void* out, size_t count, MPI_Datatype type, MPI_Op op, MPI_Comm comm);
  // Fills rank's input and checks the output; returns wrong elements.
  void (*fill)(void* in, size_t count, snclDataType_t type, snclRedOp_t op, int rank, int nranks);
  size_t (*check)(const void* out, size_t count, snclDataType_t type, snclRedOp_t op, int rank, int nranks);
};

int run(int argc, char** argv, const Collective& coll);

// Helpers for data whose reduction is exact in every supported type.
double valueOf(snclRedOp_t op, int rank, int nranks, size_t i);
double reducedValue(snclRedOp_t op, int nranks, size_t i);
void store(snclDataType_t type, void* base, size_t i, double v);
double load(snclDataType_t type, const void* base, size_t i);
size_t typeSize(snclDataType_t type);

}  // namespace perf
