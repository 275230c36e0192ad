// One rank's part of a case: the split, the buffers, the calls, and the checks against
// the host reference.
#pragma once

#include <cstdint>

#include "sncl/sncl.h"
#include "tools/randtest/case.h"

namespace randtest {

enum Status : int { kPass = 0, kWrong = 1, kError = 2, kHang = 3 };

// What a rank reports of one case (lives in memory shared with the driver).
struct RankReport {
  int status;
  int result;      // snclResult_t of the first failed call
  uint64_t wrong;  // wrong elements (and damaged guard or input bytes)
  uint64_t ops;    // calls this rank made: collectives, sends, receives
  int64_t ms;      // how long the case took on this rank
  char note[320];  // the first failure, in words
};

// Runs c on world (this process is world rank `rank`); fills *rep. Returns false when
// the comm may be unusable for later cases (a call failed).
bool runCase(const Case& c, int rank, snclComm_t world, RankReport* rep);

}  // namespace randtest
