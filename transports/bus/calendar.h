// The reservations of one link direction: its busy intervals on the modeled clock, in the
// bus's shared segment. A chunk's hold fills the free time from its ready time on, gap by
// gap (its packets interleave with other flows'), and it has left when the hold is used
// up. Ranks book in wall-clock order, but their modeled clocks do not move together (a
// rank held up by its CPU books with an older cursor than one that just entered the next
// call); with a single "busy until" the late booking would queue behind time that was free
// when it was ready, and the modeled duration would depend on scheduling.
#pragma once

#include <atomic>
#include <cstdint>

namespace sncl::bus {

struct Calendar {
  // Disjoint, non-touching intervals sorted by start; when a booking would need one more,
  // the two with the shortest gap between them merge (the gap counts as busy: the least
  // free time lost).
  static constexpr uint32_t kIntervals = 7;

  // Returns the start of a hold-long interval at or after ready, and books it.
  uint64_t book(uint64_t ready, uint64_t hold);

  void erase(uint32_t i);  // with the lock held

  std::atomic<int32_t> owner;  // pid holding the lock, 0: free
  uint32_t count;
  uint64_t start[kIntervals];
  uint64_t end[kIntervals];
};

}  // namespace sncl::bus
