#include "algorithms/p2p.h"

#include <algorithm>

namespace sncl::algo {

P2pStatus PointToPoint::build(int rank, int nranks, const P2pOp* ops, size_t n, P2pState* state, Schedule* out,
                              size_t* badOp) {
  out->clear();
  const size_t ranks = static_cast<size_t>(nranks);
  if (state->sent.size() != ranks) {
    state->sent.assign(ranks, 0);
    state->received.assign(ranks, 0);
  }
  // Messages to oneself pair up in posting order; check them before anything changes.
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

  for (size_t i = 0; i < pairs; ++i) {
    const uint32_t s = state->selfSends[i], r = state->selfRecvs[i];
    out->add({OpKind::Copy, userBuf(s), userBuf(r), -1, 0, 0, 0, ops[s].bytes});
  }
  for (size_t k = 0; k < n; ++k) {
    const P2pOp& op = ops[k];
    if (op.peer == rank) continue;
    const size_t peer = static_cast<size_t>(op.peer);
    if (op.send) out->add({OpKind::Send, userBuf(k), userBuf(k), op.peer, state->sent[peer]++, 0, 0, op.bytes});
    else out->add({OpKind::Recv, userBuf(k), userBuf(k), op.peer, state->received[peer]++, 0, 0, op.bytes});
  }
  out->endStep();
  return P2pStatus::Ok;
}

}  // namespace sncl::algo
