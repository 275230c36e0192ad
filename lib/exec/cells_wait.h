// Waiting for a peer's cell (LocalCells, lib/transport/transport.h): as the comm's wait
// policy says, a short spin with a core per rank (a few yields without), then sleeps on the doorbell between looks at the
// peer's liveness, the comm's fault side channel, the wait hook and the deadline. Shared by
// the cells of small collectives (cells.h) and the collectives on shared buffers
// (shared_colls.h).
#pragma once

#include <cstdint>

#include "lib/base/error.h"
#include "lib/base/wait_policy.h"
#include "lib/transport/transport.h"

namespace sncl {

// How long and how to wait for a peer.
struct CellsWait {
  int64_t timeoutMs = 60000;  // a peer that publishes nothing for this long fails the call
  WaitPolicy policy;          // spin or yield before sleeping (lib/comm/threading.h)
  // Asked now and then while waiting (rate-limited by the callee): true stops the call
  // with interrupted set (the comm's fault handling takes over).
  bool (*interrupt)(void* ctx) = nullptr;
  void* ctx = nullptr;
  // snclCommSetWaitHook's function, called as the executor calls it while a step waits
  // (a runtime that embeds sncl, e.g. the MPI drop-in, progresses meanwhile); with it the
  // sleeps are the executor's short ones.
  void (*hook)(void* user) = nullptr;
  void* hookUser = nullptr;
};
class CellsWaiter {
 public:
  CellsWaiter(LocalCells& cells, int rank, const CellsWait& w, bool* interrupted)
      : cells_(cells), rank_(rank), w_(w), interrupted_(interrupted), spinMicros_(w.policy.spinHere()) {}

  // Until peer published call (or a later one). Errors: the peer's failure (RemoteError
  // naming it), the deadline (Timeout), an interrupt (RemoteError with *interrupted set).
  Result waitFor(int peer, uint64_t call);

 private:
  LocalCells& cells_;
  int rank_;
  const CellsWait& w_;
  bool* interrupted_;
  int64_t spinMicros_;  // asked once per call: a thread-local read
};

}  // namespace sncl
