#include "lib/comm/p2p_group.h"

#include <algorithm>
#include <optional>

#include "lib/base/clock.h"
#include "lib/base/log.h"
#include "lib/comm/catch_up.h"
#include "lib/comm/comm.h"

namespace sncl {
namespace {

// Point-to-point tags carry this where a collective's carry its sequence number: sends and
// receives are not collective, so the ranks' counts of them differ.
constexpr uint64_t kPointToPointSeq = 0xffffffff;

// Runs a schedule as one step of the comm, bracketed for transports that model time.
// With retry on, its failures are the agreement's to judge (logged at INFO; a group that
// fails for good says why at WARN when it returns).
Result runTimed(snclComm* comm, const algo::Schedule& schedule, const ExecArgs& args, const CallHints& hints) {
  for (auto& t : comm->transports) t->callBegin(hints);
  std::optional<ExpectedErrors> expected;
  if (comm->fault.retry) expected.emplace();
  const Result r = comm->executor->run(schedule, args);
  expected.reset();
  for (auto& t : comm->transports) t->callEnd();
  return r;
}

// Receives of the group that the last run completed, from its executor's record.
void noteReceived(P2pGroupState& g, const algo::Schedule& schedule) {
  if (schedule.numSteps() == 0) return;
  for (uint32_t i = 0; i < schedule.stepEnd[0]; ++i) {
    const algo::Op& op = schedule.ops[i];
    if (op.kind == algo::OpKind::Recv && g.opDone[i]) g.recvDone[algo::userBufIndex(op.dstBuf)] = 1;
  }
}

// Builds the rest of the group after a Retry decision: what each peer lacks of this
// rank's messages (the decision's counts) and what this rank lacks of theirs (its own).
void buildRest(snclComm* comm, const Decision& d) {
  P2pGroupState& g = comm->p2pGroup;
  const size_t n = size_t(comm->nranks);
  g.sendFrom.assign(n, 0);
  for (const auto& [peer, count] : d.delivered)
    if (peer >= 0 && size_t(peer) < n) g.sendFrom[size_t(peer)] = count;
  std::vector<std::pair<int, uint32_t>> mine;
  p2pDelivered(comm, &mine);
  g.recvFrom.assign(n, 0);
  for (const auto& [peer, count] : mine) g.recvFrom[size_t(peer)] = count;
  algo::PointToPoint::buildRemaining(comm->rank, comm->p2pOps.data(), comm->p2pOps.size(), g.sendFrom.data(),
                                     g.recvFrom.data(), true, &comm->p2pSchedule);
}

struct InFlight {
  P2pGroupState& g;
  explicit InFlight(P2pGroupState& state) : g(state) { g.inFlight = true; }
  ~InFlight() { g.inFlight = false; }
};

}  // namespace

void p2pDelivered(const snclComm* comm, std::vector<std::pair<int, uint32_t>>* out) {
  out->clear();
  const algo::P2pState& s = comm->p2p;
  const P2pGroupState& g = comm->p2pGroup;
  for (size_t peer = 0; peer < s.received.size(); ++peer) {
    uint32_t count = s.received[peer];
    if (g.inFlight)
      for (size_t k = 0; k < comm->p2pOps.size(); ++k) {
        const algo::P2pOp& op = comm->p2pOps[k];
        if (!op.send && size_t(op.peer) == peer && op.peer != comm->rank && !g.recvDone[k]) count = std::min(count, op.tag);
      }
    if (count > 0) out->push_back({int(peer), count});
  }
}

Result runPointToPoint(snclComm* comm, const GroupTask* tasks, size_t n) {
  comm->p2pOps.clear();
  comm->p2pBuffers.clear();
  bool sends = false, receives = false;  // to and from other ranks
  for (size_t i = 0; i < n; ++i) {
    const CollOp& op = tasks[i].op;
    if (!isPointToPoint(op.coll)) continue;
    const bool send = op.coll == CollType::Send;
    comm->p2pOps.push_back({send, op.peer, op.count * dtypeSize(op.dtype)});
    comm->p2pBuffers.push_back(send ? const_cast<void*>(op.input) : op.output);
    if (op.peer != comm->rank && op.count) (send ? sends : receives) = true;
  }
  const CallHints hints{.sendsAndReceives = sends && receives};
  FaultState& f = comm->fault;
  const bool acked = f.retry && comm->nranks > 1;
  size_t bad = 0;
  const algo::P2pStatus status = algo::PointToPoint::build(comm->rank, comm->nranks, comm->p2pOps.data(),
                                                           comm->p2pOps.size(), acked, &comm->p2p, &comm->p2pSchedule,
                                                           &bad);
  switch (status) {
    case algo::P2pStatus::Ok: break;
    case algo::P2pStatus::SelfSendUnmatched:
      return fail(snclInvalidUsage, "rank {}: a send to itself ({} bytes) has no receive from itself in its group",
                  comm->rank, comm->p2pOps[bad].bytes);
    case algo::P2pStatus::SelfRecvUnmatched:
      return fail(snclInvalidUsage, "rank {}: a receive from itself ({} bytes) has no send to itself in its group",
                  comm->rank, comm->p2pOps[bad].bytes);
    case algo::P2pStatus::SelfSizeMismatch:
      return fail(snclInvalidArgument, "rank {}: a receive from itself of {} bytes is paired with a send of another size",
                  comm->rank, comm->p2pOps[bad].bytes);
  }
  P2pGroupState& g = comm->p2pGroup;
  const InFlight inFlight(g);
  g.recvDone.assign(comm->p2pOps.size(), 0);
  ExecArgs args;
  args.userBuffers = comm->p2pBuffers.data();
  args.elemSize = 1;
  args.seq = kPointToPointSeq;
  double failedAt = 0;
  for (int attempt = 1;; ++attempt) {
    if (acked) {
      g.opDone.assign(comm->p2pSchedule.ops.size(), 0);
      args.opDone = g.opDone.data();
    }
    Result r = runTimed(comm, comm->p2pSchedule, args, hints);
    const bool interrupted = comm->executor->interrupted();
    if (acked) noteReceived(g, comm->p2pSchedule);
    if (r == snclSuccess && (!acked || !faultPending(comm))) break;
    if (!acked) {
      commSetAsyncError(comm, r);
      // A peer that never posts its side leaves this rank waiting: most likely a missing call.
      if (r == snclTimeout)
        return fail(snclInvalidUsage,
                    "rank {}: sends/receives did not complete by the deadline ({} ms): does every peer post the "
                    "matching snclRecv/snclSend, with the same count? ({})",
                    comm->rank, comm->timeoutMs, lastError());
      return r;
    }
    // Not a fault the comm can agree its way out of: the comm is revoked or aborted, this
    // rank is dead, or the caller's sends and receives do not match.
    Result final = snclSuccess;
    if (f.revoked.load()) final = fail(snclRemoteError, "comm {} rank {}: {}", comm->name, comm->rank, revokedText(comm));
    else if (comm->aborted.load() || faultSelfDead(comm)) final = r == snclSuccess ? snclRemoteError : r;
    else if (!interrupted && (r == snclInvalidArgument || r == snclInvalidUsage))
      final = fail(r, "{} (rank {} in a group of {} sends and receives)", lastError(), comm->rank, comm->p2pOps.size());
    if (final != snclSuccess) {
      commSetAsyncError(comm, final);
      return final;
    }
    const std::string cause = r != snclSuccess && !interrupted ? lastError() : std::string();
    if (failedAt == 0) failedAt = nowSeconds();
    Decision d;
    Result agreed = faultAgree(comm, comm->seq, interrupted ? snclSuccess : r, cause, attempt < f.maxAttempts, nullptr, &d);
    if (agreed == snclSuccess && d.verdict != Verdict::Retry)
      agreed = recordError(d.code, fmt::format("comm {} rank {}: {}", comm->name, comm->rank, d.message));
    if (agreed == snclSuccess) agreed = faultApplyRetry(comm, d);
    if (agreed == snclSuccess && d.catchUpSeq != Decision::kNoCatchUp) agreed = catchUp(comm, d, comm->seq);
    if (agreed != snclSuccess) {
      commSetAsyncError(comm, agreed);
      return agreed;
    }
    buildRest(comm, d);
  }
  if (failedAt == 0) return snclSuccess;
  ++f.stats.reroutes;
  f.stats.lastRecoveryMs = (nowSeconds() - failedAt) * 1000;
  log::info(log::Subsys::Fault,
            "comm {} rank {}: a group of {} sends and receives (after call #{}) went through a lost link: finished "
            "its remaining messages on topology epoch {}, {:.1f} ms from the failure",
            comm->name, comm->rank, comm->p2pOps.size(), comm->seq, comm->topology->epoch(), f.stats.lastRecoveryMs);
  return snclSuccess;
}

}  // namespace sncl
