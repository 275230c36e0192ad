#include "lib/exec/cells_wait.h"

#include <sched.h>

#include "lib/base/clock.h"

namespace sncl {
namespace {

// Longest sleep between looks at the peer's liveness and the fault side channel.
constexpr int64_t kSliceMicros = 20000;
constexpr int64_t kHookSliceMicros = 200;  // the executor's sleep, so a wait hook runs as often

}  // namespace

Result CellsWaiter::waitFor(int peer, uint64_t call) {
  const WaitPolicy& policy = w_.policy;
  const int64_t spinMicros = spinMicros_;
  if (spinMicros > 0) {
    // A quick peer is seen before the clock is read (which costs as much as a few looks).
    for (int i = 0; i < 64; ++i) {
      if (cells_.published(peer, call)) return snclSuccess;
      cpuRelax();
    }
  } else if (cells_.published(peer, call)) {
    return snclSuccess;
  }
  const auto start = Clock::now();
  if (spinMicros > 0) {
    const auto spinUntil = start + std::chrono::microseconds(spinMicros);
    do {
      for (int i = 0; i < 64; ++i) {
        if (cells_.published(peer, call)) return snclSuccess;
        cpuRelax();
      }
    } while (Clock::now() < spinUntil);
  } else {
    for (int i = 0; i < policy.yields; ++i) {
      sched_yield();
      if (cells_.published(peer, call)) return snclSuccess;
    }
  }
  const Deadline deadline = Deadline::afterMs(w_.timeoutMs);
  for (;;) {
    if (w_.hook) w_.hook(w_.hookUser);
    if (w_.interrupt && w_.interrupt(w_.ctx)) {
      *interrupted_ = true;
      return snclRemoteError;
    }
    const Result state = cells_.peerState(peer);
    // Published before it left (a peer that finished its calls and closed): the cell stands.
    if (cells_.published(peer, call)) return snclSuccess;
    if (state != snclSuccess) return state;
    if (deadline.expired())
      return fail(snclTimeout, "cells: rank {} waited {} ms for rank {} to reach call {} (timeout {} ms)", rank_,
                  w_.timeoutMs, peer, call, w_.timeoutMs);
    cells_.wait(peer, call, w_.hook ? kHookSliceMicros : kSliceMicros);
    if (cells_.published(peer, call)) return snclSuccess;
  }
}

}  // namespace sncl
