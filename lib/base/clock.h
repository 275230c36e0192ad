// Deadlines: every blocking wait in sncl takes one.
#pragma once

#include <chrono>
#include <cstdint>

namespace sncl {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  Deadline() = default;  // already past (no clock read): to be set before it is asked
  static Deadline after(std::chrono::milliseconds d) { return Deadline(Clock::now() + d); }
  static Deadline afterMs(int64_t ms) { return after(std::chrono::milliseconds(ms)); }
  static Deadline afterUs(int64_t us) { return Deadline(Clock::now() + std::chrono::microseconds(us)); }
  bool expired() const { return Clock::now() >= at_; }
  // Milliseconds left, clamped to [0, INT32_MAX], for poll() and friends.
  int remainingMs() const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    if (left < 0) return 0;
    return left > INT32_MAX ? INT32_MAX : static_cast<int>(left);
  }
  Clock::time_point at() const { return at_; }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_{};
};

// A wait with a core per rank spins this long before it sleeps: a peer busy with a copy of
// a few MiB answers within a few hundred microseconds, while a futex sleep and wake-up cost
// 50-400 us on a virtual machine (measured: 2-rank Send/Recv of 4 MiB took 440 us spinning
// 20 us, 180-230 us spinning 500 us).
constexpr int64_t kSpinBeforeSleepMicros = 500;

// A spinning thread's pause: leaves the core's shared resources to its sibling.
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

inline double nowSeconds() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

}  // namespace sncl
