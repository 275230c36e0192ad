// The bus's shared segment: one per comm, mapped by every rank, holding what all ranks of
// the emulated supernode must see alike: a reservation calendar and counters per link
// direction, the health of every link, the liveness of every rank, jitter settings, and
// per ordered pair of ranks a ring of chunk arrival times (the sender writes the modeled
// arrival of each chunk it sends; the receiver reads it when the chunk's bytes came).
//
// All times are CLOCK_MONOTONIC nanoseconds ("wall"); the model runs on the wall clock
// slowed by the timescale, so a modeled duration is a wall duration / timescale.
#pragma once

#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "lib/base/error.h"
#include "lib/transport/transport.h"
#include "transports/bus/calendar.h"

namespace sncl::bus {

inline uint64_t wallNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

struct alignas(64) Channel {
  Calendar reserved;  // when this link direction is busy (wall ns)
  std::atomic<uint64_t> bytes;
  std::atomic<uint64_t> chunks;
  std::atomic<uint64_t> busyWallNs;
  std::atomic<uint64_t> errors;
  std::atomic<uint64_t> jittered;
};

enum class Health : uint32_t { Up = 0, Down = 1, Degraded = 2 };

struct LinkHealth {
  std::atomic<uint32_t> state;        // Health
  std::atomic<uint32_t> slowdownX1k;  // degraded: transfers take this / 1000 times longer
  std::atomic<uint64_t> downAtNs;     // wall time it went down
  std::atomic<uint64_t> downCall;     // the call (1 = first) the rank that took it down was in
  // For the job view's verdict (lib/comm/link_verdict.h): counted once per change, by the
  // rank whose store changed the state.
  std::atomic<uint64_t> downs;        // times it went down
  std::atomic<uint64_t> faultAlarms;  // times it became a fault: down, or slowed past the fault line
  std::atomic<uint64_t> recentDownNs[3];  // wall times of the last three downs, slot downs % 3
};

struct RankHealth {
  std::atomic<uint64_t> deadAtNs;  // 0: alive; else wall time it stopped responding
  std::atomic<uint64_t> plannedSeq;  // collectives it has planned or is planning
  uint64_t appliedChanges;           // link changes it has applied (changes' lock held)
};

// A link coming back up or changing speed. Ranks learn of it at different times, yet all
// must plan a collective on the same graph: it takes effect from the first collective no
// rank had planned when it was made (docs/bus.md).
struct LinkChange {
  uint64_t fromSeq;
  uint32_t link;
  uint32_t state;        // Health: Up or Degraded
  uint32_t slowdownX1k;  // degraded: transfers take this / 1000 times longer
  uint32_t pad;
  uint64_t atNs;         // when it was injected (wall clock of the bus)
};

struct LinkChanges {
  static constexpr uint32_t kEntries = 64;  // a ring: a change is kept until every rank applied it
  std::atomic<int32_t> owner;               // PidLock
  std::atomic<uint32_t> writers;            // ranks logging a change right now
  std::atomic<uint64_t> count;              // changes ever made; entry i sits at i % kEntries
  LinkChange entry[kEntries];
};

struct ArrivalEntry {
  std::atomic<uint64_t> seq;  // chunk sequence number + 1 of the pair (0: never written)
  uint64_t arrivalNs;
};

struct Header {
  uint64_t magic;
  uint32_t nranks;
  uint32_t nlinks;
  uint32_t ringEntries;
  uint32_t pad;
  uint64_t originNs;                   // wall time of setup: t=0 of time triggers
  std::atomic<uint64_t> healthEpoch;   // bumped on every change of link or rank health
  std::atomic<uint64_t> jitterPpm;     // fraction of chunks delayed, parts per million
  std::atomic<uint64_t> jitterWallNs;  // their extra delay
  std::atomic<uint32_t> detached;      // ranks that closed their transport
  LinkChanges changes;
};

// The mapped segment and typed views of it.
class SharedState {
 public:
  // Collective: rank 0 creates the segment, every rank maps it, rank 0 unlinks it once all
  // did. ringEntries per ordered pair.
  static Result open(const TransportContext& ctx, uint64_t key, uint32_t nlinks, uint32_t ringEntries,
                     std::unique_ptr<SharedState>* out);

  Header& header() const { return *header_; }
  Channel& channel(uint64_t id) const { return channels_[id]; }
  size_t channelCount() const { return size_t(header_->nlinks) * 2; }
  LinkHealth& link(uint32_t l) const { return links_[l]; }
  RankHealth& rank(int r) const { return ranks_[r]; }
  size_t bytes() const { return bytes_; }
  // Ring of the ordered pair src -> dst.
  ArrivalEntry* ring(int src, int dst) const {
    return rings_ + (size_t(src) * header_->nranks + size_t(dst)) * header_->ringEntries;
  }
  // Chunks of src -> dst the receiver has read (the sender may reuse entries below it).
  std::atomic<uint64_t>& consumed(int src, int dst) const {
    return consumed_[size_t(src) * header_->nranks + size_t(dst)].v;
  }

 private:
  struct alignas(64) Counter {
    std::atomic<uint64_t> v;
  };
  SharedState() = default;
  void bind(char* base);

  std::shared_ptr<void> keep_;  // the mapping (or the in-process segment)
  size_t bytes_ = 0;
  Header* header_ = nullptr;
  Channel* channels_ = nullptr;
  LinkHealth* links_ = nullptr;
  RankHealth* ranks_ = nullptr;
  Counter* consumed_ = nullptr;
  ArrivalEntry* rings_ = nullptr;
};

}  // namespace sncl::bus
