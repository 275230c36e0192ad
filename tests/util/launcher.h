// Runs ranks as real processes (fork) for multi-rank tests, with a deadline.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "sncl/sncl.h"

namespace sncl::test {

struct RankExit {
  int code = -1;        // exit code, when the process exited
  int signal = 0;       // signal that ended it, if any
  bool killed = false;  // killed by the launcher at the deadline
};

// Forks nranks processes sharing one unique id (made by rank 0's process after the fork,
// so that this process forks without threads); rank r runs
// body(r, nranks, id) and exits with its return value (an exception exits with 1). All
// children are killed with SIGKILL when timeoutMs passes.
std::vector<RankExit> runRanks(int nranks,
                               const std::function<int(int rank, int nranks, const snclUniqueId& id)>& body,
                               int timeoutMs = 120000);

// True when every rank exited with 0; otherwise prints which did not.
bool allSucceeded(const std::vector<RankExit>& exits);

// Joins a comm whose planner may use only the algorithms in algo (SNCL_ALGO's syntax);
// prints why on failure. Returns the result.
snclResult_t initWithAlgo(snclComm_t* comm, int nranks, const snclUniqueId& id, int rank, const char* algo);
// Two comms of the same ranks, so that one test covers both kinds of schedule: *direct
// (one-shot "direct" only) and *pipelined ("ring,chain": small counts cross several
// chunks), which meets through a unique id broadcast over the first. 0 on success.
int initDirectAndPipelined(int nranks, const snclUniqueId& id, int rank, snclComm_t* direct, snclComm_t* pipelined);

// Counts the shm segments in /dev/shm that this process or a rank process it launched
// made (other programs on the machine may hold segments of their own meanwhile).
int countShmSegments();

}  // namespace sncl::test
