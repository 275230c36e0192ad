// A group's sends and receives on one comm, run as one step, finished after a fault.
//
// With retry on, groups are acked (algorithms/p2p.h): a sender's group ends only once its
// messages arrived. A fault during a group joins the comm's agreement like a collective
// (lib/comm/fault.h), with this rank's position: between collectives seq-1 and seq, and, per
// peer, how many of its messages this rank has received whole (a receive of the group in
// flight that did not complete counts as not received, with every later one from that
// peer). The decision tells each rank how many of its messages each peer has; after the
// reset each rank runs what is left: the sends its peers lack, the receives it lacks.
// Both sides of a message compute the same answer from the same counts, so nothing is
// sent twice or waited for in vain.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "lib/base/error.h"
#include "lib/comm/group.h"

struct snclComm;

namespace sncl {

// What a fault's survey needs of the group in flight.
struct P2pGroupState {
  bool inFlight = false;
  std::vector<uint8_t> opDone;    // per schedule op, set by the executor
  std::vector<uint8_t> recvDone;  // per op of the group: its receive completed
  std::vector<uint32_t> sendFrom, recvFrom;  // per peer: first tag still to send, to receive
};

// Runs the sends and receives among tasks as one step (with retry: to the end, through
// faults that leave a route).
Result runPointToPoint(snclComm* comm, const GroupTask* tasks, size_t n);

// Per peer (>0 only): messages from it this rank has received whole.
void p2pDelivered(const snclComm* comm, std::vector<std::pair<int, uint32_t>>* out);

}  // namespace sncl
