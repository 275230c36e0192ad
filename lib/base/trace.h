// The trace recorder's buffer (SNCL_TRACE, docs/observability.md): fixed-size events in
// memory allocated once, when the comm is made, so that recording on the path of a call
// neither allocates nor does I/O. lib/comm turns the events into a Chrome trace file when
// the comm ends; lib/exec records its schedule steps here, which is why it is in base.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace sncl::trace {

enum class Kind : uint8_t { Call = 1, Step = 2, Round = 3 };
// The thread an event ran on, for the name of its track.
enum class Role : uint8_t { Caller = 0, Stream = 1, GroupWorker = 2 };

// One event; what u[] and i[] hold depends on kind (lib/comm/trace_file.cc reads them):
//   Call:  u = {count, bytes, sends<<32 | recvs}, i = {plan, op, result, root}, b = {coll, dtype}
//   Step:  u = {send bytes, recv bytes, counts}, i = {step, steps, send peer, recv peer}
//   Round: u = {info index, transport resets}, i = {round, verdict, code, attempt},
//          b = {coordinated, pulled in}
// Step counts pack sends, receives, reductions and copies, 16 bits each (saturated).
struct Event {
  int64_t startNs;
  int64_t durNs;
  uint64_t seq;
  uint64_t u[3];
  uint32_t tid;
  int32_t i[4];
  uint8_t kind;
  uint8_t role;
  uint8_t b[2];
};

// Nanoseconds of steady_clock, which is CLOCK_MONOTONIC on Linux: one clock for every
// process of a host, so that the ranks of a host line up in a merged trace.
int64_t nowNs();
// CLOCK_MONOTONIC_COARSE (a tick's resolution, a few ms): the status's clock, read at
// every call whether anyone observes or not, so it must cost next to nothing.
int64_t coarseNowNs();
// This thread's kernel id (cached: one system call per thread) and its role, which
// lib/comm sets when the thread starts running calls.
uint32_t threadId();
Role threadRole();
void setThreadRole(Role role);

// Events in the order recorded, up to a capacity fixed at construction; past it, events
// are counted as dropped. One writer at a time (the comm's runMutex serializes every
// recording thread and the final write-out).
class Buffer {
 public:
  explicit Buffer(size_t capacity);
  void push(const Event& e) {
    if (size_ == capacity_) {
      ++dropped_;
      return;
    }
    events_[size_++] = e;
  }
  // The call running now, for events recorded below it that do not know it (the steps
  // of a group's sends and receives, whose tags carry no sequence number).
  void setCallSeq(uint64_t seq) { callSeq_ = seq; }
  uint64_t callSeq() const { return callSeq_; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  uint64_t dropped() const { return dropped_; }
  const Event& operator[](size_t i) const { return events_[i]; }

 private:
  // Zeroed at construction, which commits its pages: a page fault on first touch costs
  // more than the recording itself (0.25 us per call of 3 events on this project's VM).
  std::unique_ptr<Event[]> events_;
  size_t capacity_;
  size_t size_ = 0;
  uint64_t dropped_ = 0;
  uint64_t callSeq_ = 0;
};

}  // namespace sncl::trace
