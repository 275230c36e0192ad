// Point-to-point: the sends and receives a rank posts on one comm in one group become one
// step, so any order of matching sends and receives completes, as in NCCL. Messages to
// oneself are copies, paired in posting order. Data tags count messages per direction of
// a pair across groups, so a send that its peer never received shows up as a tag
// mismatch at the pair's next message instead of being taken for a later one.
//
// Acked groups (a comm that re-runs calls after a fault) add a second step: each receiver
// answers every message with an empty one, and each sender waits for those, so a group
// that finished on a sender means its messages arrived. After a fault the ranks then only
// need each other's counts of messages received to finish an interrupted group
// (buildRemaining): no rank ever has to resend from a buffer it has returned.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/schedule.h"

namespace sncl::algo {

struct P2pOp {
  bool send;
  int peer;
  size_t bytes;
  uint32_t tag = 0;  // set by build: the message's number in its direction of the pair
};

// Messages exchanged with each peer so far (the next tags), kept by the comm across
// groups, plus per-group workspace. Sized to nranks by the first build.
struct P2pState {
  std::vector<uint32_t> sent, received;
  std::vector<uint32_t> selfSends, selfRecvs;
};

enum class P2pStatus { Ok, SelfSendUnmatched, SelfRecvUnmatched, SelfSizeMismatch };

// An ack's tag: its message's with the top bit set (data tags stay below it).
constexpr uint32_t kAckTag = 0x80000000u;

struct PointToPoint {
  // Fills out with ops[0..n)'s messages, op k reading or writing userBuf(k) (counts are
  // bytes), and sets each op's tag. On a self send or receive without its partner, or
  // partners of different sizes, returns why, sets *badOp to the op at fault and leaves
  // state unchanged.
  static P2pStatus build(int rank, int nranks, P2pOp* ops, size_t n, bool acked, P2pState* state, Schedule* out,
                         size_t* badOp);
  // What is left of a built group: self copies again (they are idempotent), the sends to
  // each peer from tag sendFrom[peer] on, the receives from each peer from recvFrom[peer]
  // on (both indexed by rank), and their acks.
  static void buildRemaining(int rank, const P2pOp* ops, size_t n, const uint32_t* sendFrom, const uint32_t* recvFrom,
                             bool acked, Schedule* out);
};

}  // namespace sncl::algo
