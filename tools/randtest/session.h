// A session: one world of forked rank processes sharing a unique id, running a list of
// cases in order with a deadline per case.
#pragma once

#include <string>
#include <vector>

#include "tools/randtest/case.h"
#include "tools/randtest/rank.h"

namespace randtest {

struct SessionOptions {
  std::string transport = "shm";  // shm, bus, ofi (every pair), mixed (virtual hosts: shm + ofi)
  int timeoutMs = 20000;          // the comms' deadline; a case may take this plus a grace
};

struct CaseOutcome {
  Status status = kPass;
  uint64_t wrong = 0, ops = 0;
  std::string note;  // the first failure, in words
};

// Outcomes of cases[0..k): k < cases.size() when a failure (error, hang) ended the
// session early; the driver runs the rest in a new one.
std::vector<CaseOutcome> runSession(const World& world, const std::vector<Case>& cases, const SessionOptions& opt);

}  // namespace randtest
