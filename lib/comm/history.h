// What a rank keeps of the collectives it ran, so that a fault that finds the ranks in
// different calls can catch them up (lib/comm/catch_up.h) and an in-place call can be run
// again: per call its plan and shape, and the input its schedule read, within a byte budget.
//
// An input is kept only while a peer may still be in its call:
// - out of place, the caller's input stays untouched while the call runs, so a re-run
//   reads it there; it is copied when the call finishes, unless every rank has by then;
// - in place, the call overwrites its input: it is copied before the call starts.
// A kept input goes once every rank is known to have finished its call: from the progress
// board (lib/comm/progress_board.h) where the ranks share a machine; else when a later call
// completes whose result depends on every rank's input (All-Reduce, All-Gather,
// Reduce-Scatter, All-to-All of nonzero size), since every rank had then entered it.
//
// Inputs live in one reservation of the budget's size (SNCL_MEM_BUDGET or the config's
// memBudget, 1 GiB by default), used first in, first out from its start; touched pages
// stay, so no call pays page faults. When keeping a call would pass the budget (or reuse
// the slot of a call 8 back), a rank with the board waits until what it holds is finished
// everywhere (answering fault rounds, within the deadline; an in-place call waits for that
// whenever it holds anything); without the board the oldest go, and a fault that needs
// them fails naming the budget. A call larger than the budget is not kept: out of place it
// waits at its end until every rank has finished it; in place a fault in it fails the call.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lib/base/error.h"
#include "lib/comm/op.h"
#include "lib/exec/executor.h"
#include "lib/plan/planner.h"

struct snclComm;

namespace sncl {

constexpr int kKeptCalls = 8;                          // calls a fault can find the ranks apart
constexpr size_t kDefaultMemBudget = size_t(1) << 30;  // SNCL_MEM_BUDGET's default

// One kept collective: its metadata in a slot by seq % kKeptCalls, its input in the arena.
struct CallRecord {
  bool valid = false;
  bool hasInput = false;  // false: its input is not kept (a replay or restore is impossible)
  uint64_t seq = 0;
  CollOp op;  // its buffers are the caller's again: never read
  Plan plan;
  CollShape shape;
  ExecArgs args;  // elemSize, reduce
  size_t offset = 0, bytes = 0;  // of its input in the arena
};

// First in, first out byte ranges of one reservation; pages once touched are reused.
class InputArena {
 public:
  InputArena() = default;
  InputArena(const InputArena&) = delete;
  InputArena& operator=(const InputArena&) = delete;
  ~InputArena();
  void setCapacity(size_t bytes);  // before the first push
  size_t capacity() const { return capacity_; }
  // Places bytes after the newest range; false: no room (or no reservation).
  bool push(size_t bytes, size_t* offset);
  // Frees the oldest range, which must be [offset, offset + bytes).
  void pop(size_t offset, size_t bytes);
  char* at(size_t offset) { return base_ + offset; }
  size_t held() const { return held_; }
  size_t touched() const { return touched_; }  // the high-water mark: what it costs in RSS

 private:
  char* base_ = nullptr;
  size_t capacity_ = 0, held_ = 0, touched_ = 0;
  // In use: [tail_, head_), or when wrapped [tail_, end_) and [0, head_).
  size_t head_ = 0, tail_ = 0, end_ = 0;
  bool wrapped_ = false;
};

struct HistoryStats {
  uint64_t kept = 0;        // inputs copied
  uint64_t skipped = 0;     // finished inputs not copied: every rank had finished the call
  uint64_t waits = 0;       // waits on the board for room
  uint64_t dropped = 0;     // kept calls let go before every rank finished them (no board)
  uint64_t notKept = 0;     // calls larger than the budget, or with no room
  uint64_t overBudget = 0;  // kept past the budget (a fault round came during a wait)
  size_t peakHeld = 0;
};

struct CallHistory {
  CallRecord calls[kKeptCalls];
  InputArena arena;
  size_t budget = kDefaultMemBudget;
  HistoryStats stats;
};

// Sets the budget: the config's (bytes > 0), else SNCL_MEM_BUDGET, else the default.
void historyInit(snclComm* comm, size_t configBudget);
// Before call args.seq runs (retry on only): records its plan and shape; an in-place input
// is copied (waiting for room as above). Never fails the call: what cannot be kept is not.
void keepStart(snclComm* comm, const CollOp& op, const Plan& plan, const CollShape& shape, const ExecArgs& args);
// After call args.seq succeeded on this rank: tells the board, lets go of what every rank
// finished, and keeps an out-of-place input that a peer may still need. *interrupted: a
// fault round reached this rank while it waited for the others to finish the call (it
// then takes part as a rank still in it). Fails with Timeout, naming the ranks, when they
// do not finish it within the deadline.
Result keepFinished(snclComm* comm, const CollOp& op, const ExecArgs& args, bool* interrupted);
// The input of call seq, or nullptr if it is not kept.
const char* keptInput(snclComm* comm, uint64_t seq);
// The lowest call this rank can replay, given it is in call seq (seq: none kept).
uint64_t oldestKept(const snclComm* comm, uint64_t seq);

}  // namespace sncl
