// The scale simulator: runs the library's own schedules (built by the planner or by the
// algorithms' generators, never re-implemented here) over a topology in virtual time,
// without data. Two engines share one model (docs/simulator.md):
//
// - a message is a flow from the sender's endpoint to the receiver's along its route; it
//   starts when the send is posted if the transport can buffer it (up to eagerBytes),
//   else once the matching receive is posted too; it moves at its max-min fair rate
//   (flows.h) and arrives the route's latency after its last byte left;
// - a rank starts step k+1 when all of step k's operations completed (the executor's
//   rule): a send when its last byte left (the route's latency before it arrives), a receive when its message arrived and it was
//   posted (matched in posting order per pair, as the transports do), a RecvReduce after
//   the rank also reduced it, local Copy/Reduce operations when the rank did them at step
//   start.
//   Reductions and copies cost bytes / memGBs and run one at a time per rank;
//
// simulateExact follows every message (event by event); simulateAggregated runs steps in
// lockstep and simulates runs of identical steps once (for 10,000+ ranks). Lockstep is what
// rendezvous messages do to coupled schedules; eager messages let ranks run ahead of their
// neighbours, which lockstep does not credit (an upper bound; docs/simulator.md).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "algorithms/schedule.h"
#include "lib/sim/network.h"

namespace sncl::sim {

// Rank's schedule, cleared and filled by the callee. Called once per rank per run, in
// rank order (the aggregated engine) or all ranks up front (the exact one).
using ScheduleBuilder = std::function<void(int rank, algo::Schedule* out)>;

struct Workload {
  int nranks = 0;
  size_t elemSize = 1;  // bytes per element of Input/Output/Scratch ops (user buffers: bytes)
  ScheduleBuilder build;
  // How ranks' schedules repeat, claimed by the workload: the aggregated engine builds one
  // representative per class, checks the claim on a sample of the other ranks and derives
  // them (byte counts equal within its tolerance). Ranks form blocks of `block` consecutive
  // ranks; rank r = b x block + i.
  //  - rotate: rank r's schedule is rank b x block's with every peer's index within its
  //    block turned by i (a ring inside each block);
  //  - translate: rank r's schedule is rank i's with every peer's block moved by b, mod
  //    the blocks (a ring of blocks; with block 1, a ring of ranks);
  //  - both: every rank's is rank 0's, mapped both ways.
  struct Symmetry {
    int block = 0;  // 0: no claim
    bool rotate = false, translate = false;
  } symmetry;
};

struct SimOptions {
  double memGBs = 0;  // reduction and copy bandwidth per rank; 0: local work is free
  // Messages up to this many bytes are buffered by the transport (eager); longer ones need
  // the receive posted. No schedule relies on buffering (tests/util/schedule_check).
  size_t eagerBytes = size_t(4) << 20;
  // The exact engine refuses workloads with more operations than this (use the aggregated one).
  size_t maxExactOps = size_t(20) << 20;
  // Parallel channels of a route as one (lib/sim/network.h); the answer is the same.
  bool bundle = true;
  // The aggregated engine keeps at most this many route channel entries cached.
  size_t maxCachedHops = size_t(32) << 20;
};

// What bounded the run: the step (or run of identical steps) that took longest in total,
// its slowest rank and the operation that finished that rank's step last.
struct Critical {
  int rank = -1;
  uint64_t step = 0;        // first step (lockstep index) of the run
  uint64_t repeats = 1;     // identical steps in the run (aggregated engine)
  double stepUs = 0;        // one step's duration
  int peer = -1;            // the message's other end; -1: a local reduction or copy
  bool sending = false;     // rank was the message's sender
  double latencyUs = 0;     // of that message's route
  double rateGBs = 0;       // its max-min fair rate (at its last rate change)
  std::string bottleneck;   // channel that limited that rate ("a->b")
};

struct SimResult {
  double timeUs = 0;
  std::vector<double> classBytes;  // bytes carried per network class (Network::className)
  Critical critical;
  uint64_t messages = 0;  // messages simulated (aggregated: counting each repeat)
  uint64_t steps = 0;     // longest rank's step count (aggregated: lockstep levels)
  uint64_t segments = 0;  // aggregated: distinct step shapes simulated
  uint64_t built = 0;     // schedules built (aggregated: the others derived by symmetry)
  // Engine runs: 1, 2 when bundles overlapped and were refined, 3 when they were turned
  // off (lib/sim/network.h, runBundled).
  uint32_t runs = 0;
};

// Bytes an operation moves or touches.
inline size_t opBytes(const algo::Op& op, size_t elemSize) {
  const bool user = op.srcBuf >= algo::Buf::FirstUser || op.dstBuf >= algo::Buf::FirstUser;
  return user ? op.count : op.count * elemSize;
}

Result simulateExact(Network& net, const Workload& w, const SimOptions& o, SimResult* out);
Result simulateAggregated(Network& net, const Workload& w, const SimOptions& o, SimResult* out);

}  // namespace sncl::sim
