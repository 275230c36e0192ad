#include "algorithms/p2p.h"

#include <algorithm>

namespace sncl::algo {
namespace {

// Step 0: ops whose keep(k) holds (self copies paired by selfSends/selfRecvs); step 1
// (acked): an ack back for every message received, one awaited for every message sent.
template <typename Keep>
void emit(int rank, const P2pOp* ops, size_t n, const P2pState& state, bool acked, Keep keep, Schedule* out) {
  for (size_t i = 0; i < state.selfSends.size(); ++i) {
    const uint32_t s = state.selfSends[i], r = state.selfRecvs[i];
    out->add({OpKind::Copy, userBuf(s), userBuf(r), -1, 0, 0, 0, ops[s].bytes});
  }
  for (size_t k = 0; k < n; ++k) {
    const P2pOp& op = ops[k];
    if (op.peer == rank || !keep(op)) continue;
    out->add({op.send ? OpKind::Send : OpKind::Recv, userBuf(k), userBuf(k), op.peer, op.tag, 0, 0, op.bytes});
  }
  out->endStep();
  if (!acked || out->numSteps() == 0) return;
  const size_t data = out->ops.size();
  for (size_t i = out->stepBegin(out->numSteps() - 1); i < data; ++i) {
    const Op op = out->ops[i];
    if (op.kind == OpKind::Copy) continue;
    out->add({op.kind == OpKind::Send ? OpKind::Recv : OpKind::Send, op.srcBuf, op.dstBuf, op.peer, op.tag | kAckTag,
              0, 0, 0});
  }
  out->endStep();
}

// Pairs self sends with self receives in posting order; false (and *badOp) when they do not.
P2pStatus pairSelf(int rank, const P2pOp* ops, size_t n, P2pState* state, size_t* badOp) {
  state->selfSends.clear();
  state->selfRecvs.clear();
  for (size_t k = 0; k < n; ++k)
    if (ops[k].peer == rank) (ops[k].send ? state->selfSends : state->selfRecvs).push_back(static_cast<uint32_t>(k));
  const size_t pairs = std::min(state->selfSends.size(), state->selfRecvs.size());
  for (size_t i = 0; i < pairs; ++i) {
    if (ops[state->selfSends[i]].bytes != ops[state->selfRecvs[i]].bytes) {
      *badOp = state->selfRecvs[i];
      return P2pStatus::SelfSizeMismatch;
    }
  }
  if (state->selfSends.size() > pairs) {
    *badOp = state->selfSends[pairs];
    return P2pStatus::SelfSendUnmatched;
  }
  if (state->selfRecvs.size() > pairs) {
    *badOp = state->selfRecvs[pairs];
    return P2pStatus::SelfRecvUnmatched;
  }
  return P2pStatus::Ok;
}

}  // namespace

P2pStatus PointToPoint::build(int rank, int nranks, P2pOp* ops, size_t n, bool acked, P2pState* state, Schedule* out,
                              size_t* badOp) {
  out->clear();
  const size_t ranks = static_cast<size_t>(nranks);
  if (state->sent.size() != ranks) {
    state->sent.assign(ranks, 0);
    state->received.assign(ranks, 0);
  }
  // Messages to oneself pair up in posting order; checked before any counter changes.
  const P2pStatus status = pairSelf(rank, ops, n, state, badOp);
  if (status != P2pStatus::Ok) return status;
  for (size_t k = 0; k < n; ++k) {
    if (ops[k].peer == rank) continue;
    const size_t peer = static_cast<size_t>(ops[k].peer);
    ops[k].tag = ops[k].send ? state->sent[peer]++ : state->received[peer]++;
  }
  emit(rank, ops, n, *state, acked, [](const P2pOp&) { return true; }, out);
  return P2pStatus::Ok;
}

void PointToPoint::buildRemaining(int rank, const P2pOp* ops, size_t n, const uint32_t* sendFrom,
                                  const uint32_t* recvFrom, bool acked, Schedule* out) {
  out->clear();
  P2pState self;  // the pairing of build, which succeeded on these ops
  size_t ignored = 0;
  pairSelf(rank, ops, n, &self, &ignored);
  emit(rank, ops, n, self, acked,
       [&](const P2pOp& op) { return op.tag >= (op.send ? sendFrom : recvFrom)[op.peer]; }, out);
}

}  // namespace sncl::algo
