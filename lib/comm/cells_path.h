// The cells path of small collectives (lib/exec/cells.*): which calls of a comm take it
// instead of the planner's schedule, and running one attempt of such a call.
//
// Every rank must take it for the same calls, or one rank waits on its cells while another
// waits for messages until the deadline. So it depends only on what all ranks agree on:
// decided at init (a transport has cells for the whole comm, at a cell size agreed at its
// setup; no SNCL_ALGO forcing an algorithm; SNCL_SHM_CELL_BYTES=0 turns it off), then per
// call on the collective, its size, and whether a fault pinned the call's plan (calls
// replayed or re-run after a catch-up run their kept schedules on every rank).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lib/base/error.h"

struct snclComm;

namespace sncl {

class Transport;
struct CollOp;
struct ExecArgs;

// Frees a shared allocation (lib/transport/shared_mem.h).
struct SharedFree {
  void operator()(char* p) const;
};

struct CellsPath {
  Transport* transport = nullptr;  // whose localCells() the comm uses; nullptr: the path is off
  uint64_t loggedBuckets = 0;      // log2 sizes whose first call was logged (INFO, PLAN)
  uint64_t calls = 0;              // calls that took it (tests, counters)
  // Larger calls on shared buffers (lib/exec/shared_colls.h): from sharedMinBytes per rank,
  // when the transport can map peers' buffers; a call whose buffers do not allow it is
  // declined by every rank alike and runs its schedule.
  bool shared = false;
  size_t sharedMinBytes = 0;
  std::vector<char> scratch;       // a block of reduced results, faulted in at init
  uint64_t cacheBytes = 0;         // of the host's last-level cache (hwloc)
  uint64_t sharedCalls = 0;        // calls that ran on shared buffers
  uint64_t sharedDeclined = 0;     // calls whose buffers sent them to the schedule
  // Calls on buffers peers cannot map run through staging areas (lib/exec/staged_colls.h):
  // this rank's, four parts of stagePartBytes, allocated at the first call on this path
  // (SNCL_SHM_STAGE_BYTES, all four parts; 0: none, such calls are declined).
  std::unique_ptr<char, SharedFree> stage;
  size_t stagePartBytes = 0;
  uint64_t stagedCalls = 0;        // calls that ran through the staging areas
  uint64_t loggedShared = 0;       // log2 sizes whose first shared call was logged
};

// At init, after the transports: turns the path on or off and logs why.
void cellsInit(snclComm* comm);
// Whether op (with sequence number seq) runs on the cells.
bool cellsTake(snclComm* comm, const CollOp& op, uint64_t seq);
// One attempt of op on the cells or shared buffers; *interrupted as
// Executor::interrupted(); *declined: the buffers do not allow it, run the schedule.
Result cellsRun(snclComm* comm, const CollOp& op, const ExecArgs& args, bool* interrupted, bool* declined);

}  // namespace sncl
