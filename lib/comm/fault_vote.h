// What the fault round (lib/comm/fault.cc) and the shrink agreement (lib/comm/fault_members.cc)
// share: how a vote is told fresh, what a majority is, how long a rank waits for a
// coordinator before turning to the next.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace sncl {

// A vote counts only as the answer to one coordinator's request in one round: its nonce
// tells a fresh answer from one queued long ago (a rank stopped and resumed finds the
// reports sent to it while it was stopped, and must not count them as a majority).
uint64_t freshNonce(int rank);

// A rank waits this long for the lowest rank it still counts on before it gives up on it
// and turns to the next (or coordinates itself): a live rank in a call answers within a
// millisecond or so, one in no call only when it enters one.
inline int64_t failoverMs(int64_t timeoutMs) { return std::max<int64_t>(timeoutMs / 4, 1); }

inline bool majority(int heard, int nranks) { return 2 * heard > nranks; }

// "0, 2, 5": sorted.
std::string rankList(std::vector<int> ranks);

}  // namespace sncl
