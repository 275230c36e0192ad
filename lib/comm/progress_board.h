// How far every rank of a comm got: a word per rank in memory all of them map, where each
// rank stores how many collectives it finished. A rank learns at the cost of a few loads
// that every rank is done with a call, so that what it kept of that call for a fault's
// catch-up (lib/comm/history.h) can go, and it can wait for that instead of keeping more.
//
// Only where every rank of the comm is on this machine and may map the others' memory
// (lib/transport/shared_mem.h): rank 0 allocates the words and sends where they are in the
// init all-gather; the others map them. Elsewhere (ranks on several hosts) the board is off
// and the history falls back to what each call's own data says (history.cc).
// SNCL_PROGRESS_BOARD=0 on rank 0 turns it off for the comm.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/base/error.h"
#include "lib/comm/op.h"
#include "lib/transport/shared_mem.h"

namespace sncl {

class ProgressBoard {
 public:
  ProgressBoard() = default;
  ProgressBoard(const ProgressBoard&) = delete;
  ProgressBoard& operator=(const ProgressBoard&) = delete;
  ~ProgressBoard();

  // Rank 0, before the init all-gather: allocates the words for nranks and fills *ref
  // (left empty, fd -1, if it cannot: the board is then off on every rank).
  void create(int nranks, SharedRef* ref);
  // Every rank, after it: maps rank 0's words when allLocal and the ref is usable. Off
  // otherwise; never fails the comm.
  void attach(int rank, int nranks, bool allLocal, const SharedRef& ref);

  bool active() const { return words_ != nullptr; }
  // This rank entered its collective number calls (from 1), op: for naming ranks that
  // never reached a call (lateText) and calls that differ across ranks (differText).
  void enter(uint64_t calls, const CollOp& op, size_t elemSize);
  // This rank finished its first `calls` collectives (release: what it kept is no
  // longer read by a peer that sees the number).
  void publish(uint64_t calls);
  // The fewest collectives any rank has finished.
  uint64_t minFinished() const;
  // Ranks that have finished fewer than calls, lowest first.
  std::vector<int> behind(uint64_t calls) const;
  // A rank behind calls whose process is gone (it will never publish): the lowest, or -1.
  // A system call per rank behind: not per spin.
  int goneBehind(uint64_t calls) const;
  // "rank(s) 2 (finished call #20 3012 ms ago) had not reached call #21": the ranks that
  // had not entered collective number calls, or "" (none, or no board).
  std::string lateText(uint64_t calls) const;
  // "calls differ across ranks at call #3: rank(s) 0, 2, 3 called allreduce of 4096 B
  // (float32 sum); rank(s) 1 called allgather of 4096 B": the ranks in call number calls
  // grouped by what they called, or "" (all alike, or no board).
  std::string differText(uint64_t calls) const;
  // What one rank's line says (the job view); zeros without a board.
  struct RankProgress {
    int64_t pid = 0;
    uint64_t finished = 0, entered = 0;
    int64_t finishedAtNs = 0;  // steady clock
    std::string call;          // the entered call, described ("" before the first)
  };
  RankProgress progressOf(int rank) const;
  int nranks() const { return active() ? nranks_ : 0; }
  // Bytes of the board in this process (rank 0's allocation, or the mapping).
  size_t bytes() const { return active() ? stride_ * size_t(nranks_) : 0; }

 private:
  int rank_ = -1, nranks_ = 0;
  // A cache line per rank: calls finished, its pid, calls entered, when it last finished
  // (steady clock, ns), the entered call and its bytes; a rank's stores never share a line
  // with another's.
  size_t stride_ = 64;
  char* words_ = nullptr;
  void* owned_ = nullptr;  // rank 0's allocation
  SharedMaps maps_;
};

}  // namespace sncl
