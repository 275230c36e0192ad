// Fault handling of a comm (docs/faults.md): the side channel over the bootstrap, the
// agreement on what failed, and the state a retry or a shrink needs.
//
// A rank that sees a call fail (a transport error, a stall past the deadline, a fault its
// transport reports) starts a recovery round. The coordinator, the lowest rank it does not
// know dead (a silent one is passed over after a quarter of the deadline), sends every other
// rank a Join with a fresh nonce (which pulls in ranks still waiting in the call: the
// executor polls for it), collects one Report answering it from each live rank (a rank that
// does not report by the deadline is lost), decides and sends the Decision. Without answers
// from a strict majority of the comm's ranks it decides nothing (CutOff). All ranks then act
// alike: mark the failed links down (a new topology epoch), reset the transports and re-run,
// or return the error. snclCommShrink is an agreement of the same shape (faultAgreeMembers).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lib/base/clock.h"
#include "lib/base/error.h"
#include "lib/plan/planner.h"
#include "sncl/sncl_ext.h"

struct snclComm;

namespace sncl {

enum class Verdict : int32_t {
  Retry = 0,     // links were lost, every rank still has a route: reset and re-run
  LinkLost = 1,  // a lost link left two ranks without a route
  RankLost = 2,  // ranks died or stopped answering
  Failed = 3,    // another error (or ranks in different calls): returned as it is
  CutOff = 4,    // no strict majority of the comm's ranks took part: this rank decides nothing
};

struct Decision {
  Verdict verdict = Verdict::Failed;
  Result code = snclSuccess;    // what the call returns unless it is retried
  std::vector<uint32_t> links;  // lost links, agreed
  std::vector<int> deadRanks;   // lost ranks, agreed
  std::string message;          // names the link or the ranks
  // Ranks were in calls catchUpSeq..highSeq: every call from catchUpSeq on is run once
  // more by every rank, each on the plan pinned here (lib/comm/catch_up.h).
  static constexpr uint64_t kNoCatchUp = UINT64_MAX;
  uint64_t catchUpSeq = kNoCatchUp;
  uint64_t highSeq = 0;
  std::vector<std::pair<uint64_t, Plan>> plans;
  // Per peer (>0 only): how many of this rank's point-to-point messages it received
  // whole (lib/comm/p2p_group.h).
  std::vector<std::pair<int, uint32_t>> delivered;
};

struct FaultState {
  bool retry = false;       // SNCL_RETRY: re-run a call that a lost link interrupted
  int maxAttempts = 3;      // of one call (a link may also fail during the re-run)
  uint32_t round = 0;       // recovery rounds so far, equal on every rank
  uint32_t attempt = 0;     // transport resets so far (salts fresh transport resources)
  uint32_t shrinks = 0;     // snclCommShrink calls so far: each is an agreement of its own
  bool broken = false;      // a lost rank or an unroutable link: later calls fail at once
  std::string brokenMessage;
  std::vector<int> deadRanks;      // agreed lost ranks (snclCommShrink's default exclusion)
  std::vector<uint32_t> lostLinks; // agreed lost links, in the topology as down
  std::atomic<bool> revoked{false};
  int revokedBy = -1;        // the peer whose snclCommRevoke reached this rank first
  bool revokeSent = false;   // this rank told its peers (once)
  double lastPollS = 0;           // of the side channel by a waiting call, rate-limited
  // A message that pulled this rank into a round while its call waited.
  int pulledBy = -1;
  bool pulledIsJoin = false;
  std::vector<char> pulledMessage;
  // Side channels whose bootstrap connection broke (a peer that exited): polled no more,
  // since every poll of a closed connection fails and logs again, hundreds of times a second.
  std::vector<uint8_t> sideBroken;
  snclFaultStats_t stats{};
};

// Reads SNCL_RETRY (default on when the comm uses the bus).
void faultInit(snclComm* comm);
// Executor hook: true when a recovery message for this rank arrived (or the comm was
// revoked); the call then stops waiting and joins the round. Cheap between polls.
bool faultPoll(snclComm* comm);
// snclCommRevoke: stops this rank's call in flight, then tells every peer over the side
// channel; a peer's call stops at its next poll (while it waits), and its later calls fail
// at once. Bounded by the comm's deadline.
Result faultRevoke(snclComm* comm);
// "revoked" or "revoked by rank r", for the errors of a revoked comm's calls.
std::string revokedText(const snclComm* comm);
// Runs one recovery round for the call with sequence number seq. cause: the call's own
// failure (snclSuccess when pulled in or when it finished but its transport saw a fault),
// causeText its message. Bounded by the comm's deadline.
// canRetry: this rank can re-run the call (SNCL_RETRY on, attempts left); plan: the
// call's (the rank's kept calls and their plans come from lib/comm/catch_up.h), or nullptr
// for a group of sends and receives, which runs between calls seq-1 and seq.
Result faultAgree(snclComm* comm, uint64_t seq, Result cause, const std::string& causeText, bool canRetry,
                  const Plan* plan, Decision* out);
// True when a transport of the comm saw a fault that the comm has not agreed on yet.
bool faultPending(snclComm* comm);
// True when this rank's own transport says it is dead (killed): it takes no part.
bool faultSelfDead(snclComm* comm);
// snclCommShrink's agreement: every rank that takes part proposes the ranks it excludes
// (status: its argument check, statusText why); the coordinator decides one member list
// (those that answered, minus the union of exclusions) and a rendezvous for it. Fails with
// snclRemoteError when this rank is cut off from a strict majority of the comm or is not a
// member, with the bad rank's code when a rank passed bad arguments. Bounded by the deadline.
Result faultAgreeMembers(snclComm* comm, const std::vector<int>& exclude, Result status, const std::string& statusText,
                         std::vector<int>* members, snclUniqueId* root);
// Applies a Retry decision (its links are down in the topology already): transports reset
// (collective).
Result faultApplyRetry(snclComm* comm, const Decision& d);

}  // namespace sncl
