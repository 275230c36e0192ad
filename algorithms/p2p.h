// Point-to-point: the sends and receives a rank posts on one comm in one group become one
// step, so any order of matching sends and receives completes, as in NCCL. Messages to
// oneself are copies, paired in posting order. Data tags count messages per direction of
// a pair across groups, so a send that its peer never received shows up as a tag
// mismatch at the pair's next message instead of being taken for a later one.
#pragma once

#include <vector>

#include "algorithms/schedule.h"

namespace sncl::algo {

struct P2pOp {
  bool send;
  int peer;
  size_t bytes;
};

// Messages exchanged with each peer so far (the next tags), kept by the comm across
// groups, plus per-group workspace. Sized to nranks by the first build.
struct P2pState {
  std::vector<uint32_t> sent, received;
  std::vector<uint32_t> selfSends, selfRecvs;
};

enum class P2pStatus { Ok, SelfSendUnmatched, SelfRecvUnmatched, SelfSizeMismatch };

struct PointToPoint {
  // Fills out with ops[0..n)'s messages, op k reading or writing userBuf(k) (counts are
  // bytes). On a self send or receive without its partner, or partners of different
  // sizes, returns why, sets *badOp to the op at fault and leaves state unchanged.
  static P2pStatus build(int rank, int nranks, const P2pOp* ops, size_t n, P2pState* state, Schedule* out,
                         size_t* badOp);
};

}  // namespace sncl::algo
