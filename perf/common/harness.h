// The shared harness of the *_perf benchmarks, in nccl-tests' style: flags, size sweep,
// timing, result checking, and the peers' matching calls (MPI, Gloo) on the same input
// beside sncl. Runs under mpirun (one rank per process, or -t threads per process) or
// standalone.
#pragma once

#include <mpi.h>

#include <cstddef>

#include "perf/common/gloo_peer.h"
#include "perf/common/options.h"
#include "sncl/sncl.h"

namespace perf {

// One call, as the harness makes it on this rank.
struct Call {
  const void* send;
  void* recv;
  size_t count;  // the collective's count argument (see Collective::blocks)
  snclDataType_t type;
  snclRedOp_t op;      // what sncl gets (a PreMulSum handle for kMulSum)
  snclRedOp_t refOp;   // what the data is for (kMulSum for a pre-multiplied sum)
  int root;
  int rank;
  int nranks;
  snclComm_t comm;
  GlooPeer* gloo;  // set when Gloo runs beside sncl
};

// What one benchmark measures, with nccl-tests' conventions.
struct Collective {
  const char* name;
  bool reduces;  // takes a reduction op (-o)
  bool rooted;   // takes a root (-r)
  // The size of a row is nranks blocks of count elements (All-Gather, Reduce-Scatter,
  // All-to-All, Gather, Scatter) or count elements (the others).
  bool blocks;
  // In place, send and receive share one buffer, the send part starting at element
  // sendOffset of it and the receive part at recvOffset (nccl-tests' in-place offsets;
  // nullptr: 0). hasInPlace false: no in-place form (a send and a receive of one buffer race).
  bool hasInPlace;
  size_t (*sendOffset)(size_t count, int rank, int root);
  size_t (*recvOffset)(size_t count, int rank, int root);
  double (*busFactor)(int nranks);
  snclResult_t (*run)(const Call& c);
  // MPI's call (out of place); nullptr: none.
  int (*runMpi)(const Call& c, MPI_Datatype type, MPI_Op op);
  // Fills this rank's send buffer; counts the wrong elements of its receive buffer.
  void (*fill)(const Call& c);
  size_t (*check)(const Call& c);
  // Gloo's call (out of place) through c.gloo; nullptr: Gloo has none.
  bool (*runGloo)(const Call& c) = nullptr;
};

int run(int argc, char** argv, const Collective& coll);

// Values whose reduction is exact in every type and rank count (small integers within
// what the type holds exactly), as nccl-tests chooses them; see values.cc.
double valueOf(snclDataType_t type, snclRedOp_t op, int rank, int nranks, size_t i);
double reducedValue(snclDataType_t type, snclRedOp_t op, int nranks, size_t i);
double mulSumScalar(int rank);
void store(snclDataType_t type, void* base, size_t i, double v);
double load(snclDataType_t type, const void* base, size_t i);
size_t typeSize(snclDataType_t type);
// Data that is only moved: a byte pattern per (rank, element).
void fillPattern(size_t elemSize, int rank, void* buf, size_t count, size_t first = 0);
size_t checkPattern(size_t elemSize, int rank, const void* buf, size_t count, size_t first = 0);

// Helpers for the benchmarks' fill and check.
void fillReduction(const Call& c, size_t count, size_t first = 0);
size_t checkReduction(const Call& c, const void* buf, size_t count, size_t first = 0);

}  // namespace perf
