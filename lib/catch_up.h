// Finishing a call that some ranks are still in after others have left it.
//
// A link fails at an instant: a rank whose transfers did not cross it can finish call k
// and wait in call k+1 while its peers fail in k. The fault agreement (lib/fault.*) then
// sees ranks one call apart. Those ahead cannot re-run k from the caller's buffers (the
// caller owns them again), so each rank keeps what k's laggards need while retry is on:
// - All-Reduce, All-Gather, Broadcast: the output, the same on every rank, which the
//   lowest rank ahead forwards to each laggard (bit for bit what the others got);
// - the other collectives: the input, with which the ranks ahead re-run k beside the
//   laggards, writing their own result nowhere.
// Then every rank re-runs its own current call as after any reroute.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/schedule.h"
#include "lib/error.h"
#include "lib/executor.h"
#include "lib/fault.h"
#include "lib/op.h"
#include "lib/planner.h"

struct snclComm;

namespace sncl {

// What a rank keeps of its last finished collective. Buffers grow, then are reused.
struct CallRecord {
  bool valid = false;
  uint64_t seq = 0;
  CollOp op;  // its buffers are the caller's again: never read
  Plan plan;
  CollShape shape;
  ExecArgs args;          // elemSize, reduce
  bool forward = false;   // data is the output (same on every rank); else the input
  std::vector<char> data;
  algo::Schedule schedule;          // built only to re-run
  std::vector<char> scratch, sink;  // for that re-run
};

// The collectives whose output is the same on every rank.
bool sameOutputEverywhere(CollType coll);

// Keeps what laggards of the call just finished would need (retry on only).
void recordCall(snclComm* comm, const CollOp& op, const Plan& plan, const CollShape& shape, const ExecArgs& args);
// Whether this rank can help ranks still in call seq-1.
bool recordServes(const snclComm* comm, uint64_t seq);

// A rank ahead of d.catchUpSeq: forward its kept output, or re-run the kept call.
Result serveCatchUp(snclComm* comm, const Decision& d);
// A laggard of a call whose output is the same everywhere: receive it from d.forwarder
// into its output buffer (final: an average is already scaled).
Result receiveForwarded(snclComm* comm, const CollOp& op, const ExecArgs& args, const Decision& d);

}  // namespace sncl
