// How a thread waits for a peer, decided once per comm by the threading model
// (lib/comm/threading.h) from the CPUs the ranks of the host run on, and used by every wait
// on the data path (the executor's, the shm transport's, the cells').
#pragma once

#include <cstdint>

#include "lib/base/clock.h"

namespace sncl {

struct WaitPolicy {
  // Spin this long before sleeping: only when no rank of the host waits for this core
  // (with a core each, a spinning rank only burns its own; a futex sleep and wake-up cost
  // 50-400 us on a virtual machine). 0: never spin.
  int64_t spinMicros = kSpinBeforeSleepMicros;
  // Yield this many times before sleeping: the peer waited for may need this core.
  int yields = 0;
  // Spin time on this thread: none on a helper thread that shares its core with the caller
  // (NoSpinHere), whatever the comm's policy.
  int64_t spinHere() const;
  bool spins() const { return spinMicros > 0; }
};

// While alive, waits on this thread never spin: a stream's thread running work on a core
// the caller needs (lib/comm/stream.h). Nests.
class NoSpinHere {
 public:
  NoSpinHere();
  ~NoSpinHere();
  NoSpinHere(const NoSpinHere&) = delete;
  NoSpinHere& operator=(const NoSpinHere&) = delete;
};

}  // namespace sncl
