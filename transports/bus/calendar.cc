#include "transports/bus/calendar.h"

#include <algorithm>

#include "transports/bus/pid_lock.h"

namespace sncl::bus {

uint64_t Calendar::book(uint64_t ready, uint64_t hold) {
  if (hold == 0) return ready;
  PidLock lock(owner);
  if (lock.tookOver() && count > kIntervals) count = 0;  // its holder died mid-update
  // The new list: the old intervals with the hold poured into the gaps from ready on
  // (a chunk's packets interleave with others' on a real link), touching ones joined.
  uint64_t s[2 * kIntervals + 2], e[2 * kIntervals + 2];
  bool fresh[2 * kIntervals + 2];  // holds some of this booking
  uint32_t n = 0;
  auto push = [&](uint64_t a, uint64_t b, bool isNew) {
    if (n && e[n - 1] == a) {
      e[n - 1] = b;
      fresh[n - 1] |= isNew;
    } else {
      s[n] = a, e[n] = b, fresh[n] = isNew, ++n;
    }
  };
  uint64_t t = ready, left = hold, done = ready;
  for (uint32_t i = 0; i < count; ++i) {
    if (left && end[i] > t) {
      if (start[i] > t) {
        const uint64_t take = std::min(left, start[i] - t);
        push(t, t + take, true);
        left -= take;
        done = t + take;
      }
      t = std::max(t, end[i]);
    }
    push(start[i], end[i], false);
  }
  if (left) {
    push(t, t + left, true);
    done = t + left;
  }
  // Too many: give up the least time. Either the shortest gap becomes busy (two intervals
  // join: a rank that far behind waits a little longer) or a short interval is forgotten
  // (its hold is lost). Forgetting makes the model optimistic, so an interval that ends
  // after this booking's ready time (a flow that may come back for the time after it)
  // counts four times, and this booking's own time is never forgotten.
  while (n > kIntervals) {
    uint32_t gap = 0, drop = n;
    uint64_t dropCost = UINT64_MAX;
    for (uint32_t i = 0; i + 1 < n; ++i)
      if (s[i + 1] - e[i] < s[gap + 1] - e[gap]) gap = i;
    for (uint32_t i = 0; i < n; ++i) {
      const uint64_t cost = (e[i] - s[i]) * (e[i] <= ready ? 1 : 4);
      if (!fresh[i] && cost < dropCost) drop = i, dropCost = cost;
    }
    if (drop == n || s[gap + 1] - e[gap] <= dropCost) {
      e[gap] = e[gap + 1];
      fresh[gap] |= fresh[gap + 1];
      drop = gap + 1;
    }
    for (uint32_t i = drop; i + 1 < n; ++i) s[i] = s[i + 1], e[i] = e[i + 1], fresh[i] = fresh[i + 1];
    --n;
  }
  std::copy(s, s + n, start);
  std::copy(e, e + n, end);
  count = n;
  return done;
}

}  // namespace sncl::bus
