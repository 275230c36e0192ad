// A schedule is what one rank does in one collective, as data: a list of steps, each a set
// of operations issued together. Schedules are pure (no I/O, no threads, no transport):
// the executor runs them on real bytes, the simulator in virtual time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sncl::algo {

// Which buffer an operation reads or writes. Offsets and counts are in elements.
// Collectives use Input, Output and Scratch; a group of sends and receives gives every
// operation its own buffer, userBuf(k) for the k-th.
enum class Buf : uint32_t { Input, Output, Scratch, FirstUser };
constexpr Buf userBuf(size_t k) { return static_cast<Buf>(static_cast<uint32_t>(Buf::FirstUser) + k); }
constexpr size_t userBufIndex(Buf b) { return static_cast<size_t>(b) - static_cast<size_t>(Buf::FirstUser); }

enum class OpKind : uint8_t {
  Send,        // send count elements at (srcBuf, src) to peer
  Recv,        // receive count elements from peer into (dstBuf, dst)
  RecvReduce,  // (dstBuf, dst) = (srcBuf, src) op received; src and dst may be the same
  Copy,        // (dstBuf, dst) = (srcBuf, src), local
  Reduce,      // (dstBuf, dst) = (dstBuf, dst) op (srcBuf, src), local
};

struct Op {
  OpKind kind;
  Buf srcBuf;
  Buf dstBuf;
  int32_t peer;    // -1 for local ops
  uint32_t tag;    // equal on the sending and the receiving side of one message
  size_t src;
  size_t dst;
  size_t count;
};

struct Schedule {
  std::vector<Op> ops;
  // Step i is ops[stepBegin(i), stepEnd[i]). A step's ops are independent of each other;
  // a step starts when the previous one has finished.
  std::vector<uint32_t> stepEnd;
  size_t scratchCount = 0;  // elements of scratch the schedule needs

  size_t numSteps() const { return stepEnd.size(); }
  uint32_t stepBegin(size_t i) const { return i == 0 ? 0 : stepEnd[i - 1]; }
  void add(const Op& op) { ops.push_back(op); }
  void endStep() {
    if (stepEnd.empty() ? !ops.empty() : stepEnd.back() != ops.size())
      stepEnd.push_back(static_cast<uint32_t>(ops.size()));
  }
  void clear() {
    ops.clear();
    stepEnd.clear();
    scratchCount = 0;
  }
};

}  // namespace sncl::algo
