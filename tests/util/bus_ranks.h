// Ranks of one process on the emulated bus (snclCommInitAll, one thread per rank), for
// the bus tests.
#pragma once

#include <functional>
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

}  // namespace sncl::test
