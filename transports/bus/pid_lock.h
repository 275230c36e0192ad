// A spinlock in the bus's shared segment, held for well under a microsecond by the pid of
// its holder. A holder that died (a killed rank) would keep it forever: after a while of
// spinning, a dead holder's lock is taken over, and tookOver() tells the caller to repair
// what it may have left half-written.
#pragma once

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

namespace sncl::bus {

class PidLock {
 public:
  explicit PidLock(std::atomic<int32_t>& owner) : owner_(owner) {
    const int32_t self = int32_t(getpid());
    for (uint32_t spins = 1;; ++spins) {
      int32_t holder = 0;
      if (owner_.compare_exchange_weak(holder, self, std::memory_order_acquire)) return;
      if (spins % 64 == 0) sched_yield();
      if (spins % 4096 == 0 && holder != 0 && kill(holder, 0) != 0 && errno == ESRCH &&
          owner_.compare_exchange_strong(holder, self, std::memory_order_acquire)) {
        tookOver_ = true;
        return;
      }
    }
  }
  ~PidLock() { owner_.store(0, std::memory_order_release); }
  PidLock(const PidLock&) = delete;
  PidLock& operator=(const PidLock&) = delete;

  bool tookOver() const { return tookOver_; }

 private:
  std::atomic<int32_t>& owner_;
  bool tookOver_ = false;
};

}  // namespace sncl::bus
