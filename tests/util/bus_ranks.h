// Ranks of one process on the emulated bus (snclCommInitAll, one thread per rank), for
// the bus tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "sncl/sncl.h"
#include "sncl/sncl_ext.h"

namespace sncl::test {

// Sets SNCL_TRANSPORT=bus (and the given SNCL_FAULTS, none when empty) and makes nranks
// comms; clears SNCL_FAULTS again so that later comms start healthy.
std::vector<snclComm_t> busComms(int nranks, const std::string& faults = "");
// Runs body(rank) on one thread per rank and joins them.
void onEveryRank(int nranks, const std::function<void(int rank)>& body);
void destroyAll(std::vector<snclComm_t>& comms);
// The rank's modeled duration of its last call (microseconds).
double lastCallUs(snclComm_t comm);
// The last call's modeled span on the comm's common clock (microseconds).
struct Span {
  double start = 0, end = 0;
};
Span lastCallSpan(snclComm_t comm);
// A collective's modeled duration from the moment its last rank entered it.
double collectiveUs(const std::vector<Span>& spans);

// Environment variables set for a scope (a test's), then unset.
struct ScopedEnv {
  ScopedEnv(std::initializer_list<std::pair<const char*, std::string>> vars) {
    for (auto& [k, v] : vars) {
      setenv(k, v.c_str(), 1);
      names.push_back(k);
    }
  }
  ~ScopedEnv() {
    for (const char* k : names) unsetenv(k);
  }
  std::vector<const char*> names;
};

// topologies/<name> of the source tree.
std::string topologyPath(const char* name);

// Random floats in [-1, 1), seeded by rank and salt: sums depend on the order of additions,
// so equal results mean the same schedule ran on the same inputs.
std::vector<float> randomFloats(int rank, size_t count, uint64_t salt = 0);
struct RankOutcome {
  snclResult_t result = snclSuccess;
  std::string message;  // snclGetLastError when it failed
  std::vector<float> out;
};
// A float sum All-Reduce of count elements of randomFloats(rank, count, salt), in place or
// not, on every rank's thread at once.
std::vector<RankOutcome> allReduceFloats(std::vector<snclComm_t>& comms, size_t count, bool inPlace,
                                         uint64_t salt = 0);

}  // namespace sncl::test
