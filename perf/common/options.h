// The benchmarks' command line: nccl-tests' flags plus the peers and the ceiling.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "sncl/sncl.h"

namespace perf {

// A pre-multiplied sum (snclRedOpCreatePreMulSum, nccl-tests' "mulsum"), for the value
// functions; the harness passes the real op to sncl.
constexpr snclRedOp_t kMulSum = static_cast<snclRedOp_t>(snclNumOps);
constexpr int kNumOps = snclNumOps + 1;  // with mulsum
// band ... lxor: sncl defines them on the integer types only; other types skip them.
constexpr bool integerOnlyOp(snclRedOp_t op) { return op >= snclBand && op <= snclLxor; }

extern const char* const kTypeNames[snclNumTypes];
extern const char* const kOpNames[kNumOps];

enum class Peer { Mpi, Gloo };
const char* peerName(Peer p);

struct Options {
  size_t minBytes = 8;
  size_t maxBytes = 64u << 20;
  size_t stepFactor = 2;
  int iters = 20;
  int warmup = 5;
  int check = 1;
  int threads = 1;  // ranks per process
  int average = 1;  // nccl-tests' -a: time across ranks 0 = rank 0's, 1 = mean, 2 = min, 3 = max
  std::vector<snclDataType_t> types{snclFloat32};
  std::vector<snclRedOp_t> ops{snclSum};
  int root = 0;
  std::vector<Peer> peers{Peer::Mpi};  // --baseline; MPI when run under mpirun
  bool ceiling = false;
  bool sharedBuffers = false;  // -R 1: buffers from snclMemAlloc; -R 0 (default): from the heap
  std::string jsonPath;  // -J
};

// Parses argv; false (after printing why, or the usage for -h with *help set) to stop.
bool parseOptions(int argc, char** argv, Options* o, bool* help);

}  // namespace perf
