// Finishing calls that some ranks are still in after others have left them.
//
// A link fails at an instant: a rank whose transfers did not cross it can finish call k
// and go on (a Broadcast's root, a call of zero elements, for several calls) while its
// peers fail in k. The fault agreement (lib/comm/fault.*) then sees ranks in calls k..k+j.
// Those ahead cannot re-run from the caller's buffers (the caller owns them again), so
// while retry is on each rank keeps what it may still need of its calls (lib/comm/history.h).
// After the agreement every call from k on is run once more by every rank, in order: a
// rank still in it re-runs it, a rank that finished it replays it from what it kept (its
// result goes nowhere: it returned one already), and a rank that had not reached it runs
// it when it gets there. Every rank runs call k+i on the plan the first ranks to reach it
// chose (the decision pins them), so the re-run's results are bit for bit the ones the
// others returned.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "algorithms/schedule.h"
#include "lib/base/error.h"
#include "lib/comm/fault.h"
#include "lib/comm/history.h"
#include "lib/plan/planner.h"

struct snclComm;

namespace sncl {

// What a replay runs in (freed after it: replays are rare), and the plans the last
// agreement pinned.
struct ReplayState {
  algo::Schedule schedule;
  std::vector<char> scratch, sink;
  // Plans the agreement pinned for calls up to pinnedUntil (inclusive).
  std::vector<std::pair<uint64_t, Plan>> pinned;
  uint64_t pinnedUntil = 0;
};

// The plans of the calls this rank kept, and of call seq's (current) plan unless it is
// nullptr (this rank has not reached call seq).
void keptPlans(const snclComm* comm, uint64_t seq, const Plan* current, std::vector<std::pair<uint64_t, Plan>>* out);

// The plan the agreement pinned for call seq, or nullptr.
const Plan* pinnedPlan(const snclComm* comm, uint64_t seq);
// Takes a catch-up decision's plans; replays this rank's kept calls from d.catchUpSeq up
// to (not including) seq, the call it is in.
Result catchUp(snclComm* comm, const Decision& d, uint64_t seq);

}  // namespace sncl
