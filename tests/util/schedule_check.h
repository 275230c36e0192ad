// Runs every rank's schedule symbolically, without processes: values are 64-bit sums of
// per-(rank, element) keys, so an element reduced twice, missed, or misplaced gives a
// wrong sum. A rank's step completes once its receives have arrived and each of its sends
// was matched by a receive its peer posted (no reliance on transport buffering).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "algorithms/schedule.h"

namespace sncl::test {

struct SymbolicResult {
  bool ok = true;
  std::string error;  // what went wrong first (deadlock, mismatch, out of bounds)
  std::vector<std::vector<uint64_t>> output;  // per rank
};

uint64_t symbolicKey(int rank, size_t element);

// build(rank, schedule) fills rank's schedule; inputs are inputCount elements per rank,
// outputs outputCount. inPlace makes Input and Output the same buffer.
SymbolicResult runSymbolic(int nranks, size_t inputCount, size_t outputCount, bool inPlace,
                           const std::function<void(int rank, algo::Schedule*)>& build);
// The same with sizes per rank (0: a buffer the rank must not touch, such as a non-root's
// output of a reduce).
SymbolicResult runSymbolic(int nranks, const std::function<size_t(int rank)>& inputCount,
                           const std::function<size_t(int rank)>& outputCount, bool inPlace,
                           const std::function<void(int rank, algo::Schedule*)>& build);

}  // namespace sncl::test
