// Which path runs one attempt of a call, decided in one place (routeCall, top to bottom),
// and running the paths other than the planner's schedule: the cells of small collectives
// (lib/exec/cells.*) and the shared buffers or staging areas of larger ones
// (lib/exec/shared_colls.*, lib/exec/staged_colls.*).
//
// Every rank must take the same path for a call, or one rank waits on its cells while
// another waits for messages until the deadline. So the route depends only on what all ranks
// agree on: decided at init (a transport has cells for the whole comm, at a cell size agreed
// at its setup; no SNCL_ALGO forcing an algorithm; SNCL_SHM_CELL_BYTES=0 turns it off), then
// per call on the collective, its size, the planner's staging crossover and whether a fault
// pinned the call's plan (calls replayed or re-run after a catch-up run their kept schedules
// on every rank). Only the shared path looks at the buffers, and its ranks agree on them in
// the call's first cell round (all read in place, all staged, or all declined to the
// schedule).
//
// On which thread: whichever runs the call — a blocking call's caller, a group's worker for
// a second comm, and for a stream the thread lib/comm/stream.cc picks from the comm's
// threading model (lib/comm/threading.h): the one that waits for the call, or the stream's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lib/base/error.h"

struct snclComm;

namespace sncl {

class LocalCells;
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

// At init, after the transports: turns the cells and shared paths on or off and logs why.
void cellsInit(snclComm* comm);

enum class CallPath : uint8_t {
  Schedule,  // the planner's schedule, run by the executor over the transports
  Cells,     // a small call through the shared-memory cells
  Shared,    // peers' buffers read and written in place; through the ranks' staging areas
             // if some buffer is not shared and stage is set; else declined to the schedule
};
struct CallRoute {
  CallPath path = CallPath::Schedule;
  bool stage = false;           // Shared: staging pays at this size (Tuning::stagedMaxBytes)
  LocalCells* cells = nullptr;  // Cells and Shared: the transport's, as routeCall found them
};
// The path of op (sequence number seq): the one decision per call.
CallRoute routeCall(snclComm* comm, const CollOp& op, uint64_t seq);
// One attempt of op on a route other than Schedule; *interrupted as Executor::interrupted();
// *declined: the buffers do not allow it, run the schedule.
Result runRoute(snclComm* comm, const CallRoute& route, const CollOp& op, const ExecArgs& args, bool* interrupted,
                bool* declined);

}  // namespace sncl
