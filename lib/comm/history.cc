#include "lib/comm/history.h"

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "lib/base/env.h"
#include "lib/base/log.h"
#include "lib/base/size_text.h"
#include "lib/comm/comm.h"

namespace sncl {

InputArena::~InputArena() {
  if (base_) munmap(base_, capacity_);
}

void InputArena::setCapacity(size_t bytes) {
  if (base_) munmap(base_, capacity_);
  base_ = nullptr;
  capacity_ = bytes;
  held_ = touched_ = head_ = tail_ = end_ = 0;
  wrapped_ = false;
  if (!bytes) return;
  // Address space only: a page costs memory once a copy touches it.
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    log::warn("retry history: cannot reserve {} of address space: {}; no call is kept", sizeText(bytes),
              strerror(errno));
    capacity_ = 0;
    return;
  }
  base_ = static_cast<char*>(p);
}

bool InputArena::push(size_t bytes, size_t* offset) {
  if (!base_ || bytes > capacity_) return false;
  if (held_ == 0) head_ = tail_ = end_ = 0, wrapped_ = false;
  if (!wrapped_) {
    // Room after the newest, or before the oldest; the front first when the end would
    // touch pages never touched before.
    const bool atEnd = head_ + bytes <= capacity_, atFront = bytes <= tail_;
    if (atEnd && (head_ + bytes <= touched_ || !atFront)) {
      *offset = head_;
      head_ += bytes;
    } else if (atFront) {
      *offset = 0;
      end_ = head_;
      head_ = bytes;
      wrapped_ = true;
    } else {
      return false;
    }
  } else {
    if (head_ + bytes > tail_) return false;
    *offset = head_;
    head_ += bytes;
  }
  held_ += bytes;
  touched_ = std::max(touched_, *offset + bytes);
  return true;
}

void InputArena::pop(size_t offset, size_t bytes) {
  held_ -= bytes;
  tail_ = offset + bytes;
  if (wrapped_ && tail_ >= end_) tail_ = 0, wrapped_ = false;
  if (held_ == 0) head_ = tail_ = end_ = 0, wrapped_ = false;
}

namespace {

// A collective whose result on every rank depends on every rank's input: a rank that
// finished it knows every rank had entered it, so finished every call before it.
bool fromEveryRank(const CollOp& op) {
  if (op.count == 0) return false;
  switch (op.coll) {
    case CollType::AllReduce:
    case CollType::AllGather:
    case CollType::ReduceScatter:
    case CollType::AlltoAll: return true;
    default: return false;
  }
}

// What a replay reads: none where this rank sends nothing (a Broadcast's or Scatter's
// non-root passes no input).
size_t inputBytes(const CollOp& op, const ExecArgs& args, int nranks) {
  return args.input ? inputCount(op, nranks) * args.elemSize : 0;
}

bool inPlace(const CollOp& op, const ExecArgs& args, int nranks) {
  const auto* in = static_cast<const char*>(args.input);
  const auto* out = static_cast<const char*>(args.output);
  const size_t inBytes = inputBytes(op, args, nranks), outBytes = outputCount(op, nranks) * args.elemSize;
  return in && out && inBytes && in < out + outBytes && out < in + inBytes;
}

// Lets go of the oldest kept input (its call's metadata stays until its slot is reused,
// for the plans a fault round reports).
void popOldest(CallHistory& h) {
  CallRecord* oldest = nullptr;
  for (CallRecord& rec : h.calls)
    if (rec.valid && rec.hasInput && rec.bytes && (!oldest || rec.seq < oldest->seq)) oldest = &rec;
  if (!oldest) return;
  h.arena.pop(oldest->offset, oldest->bytes);
  oldest->hasInput = false;
}

// Every call before upTo is finished on every rank: nothing of them is needed.
void release(CallHistory& h, uint64_t upTo) {
  while (true) {
    CallRecord* oldest = nullptr;
    for (CallRecord& rec : h.calls)
      if (rec.valid && rec.seq < upTo && (!oldest || rec.seq < oldest->seq)) oldest = &rec;
    if (!oldest) return;
    if (oldest->hasInput && oldest->bytes) h.arena.pop(oldest->offset, oldest->bytes);
    oldest->valid = oldest->hasInput = false;
  }
}

constexpr size_t kWaitInPlaceBytes = 64 << 10;

void releaseFinished(snclComm* comm) {
  if (comm->board.active()) release(comm->history, comm->board.minFinished());
}

// Waits until every rank finished `calls` collectives. False when the deadline passed, or
// a fault round reached this rank first (*interrupted) and they had not.
bool waitFinished(snclComm* comm, uint64_t calls, bool* interrupted) {
  *interrupted = false;
  ++comm->history.stats.waits;
  const Deadline deadline = Deadline::afterMs(comm->timeoutMs);
  const WaitPolicy& policy = comm->threads.wait;
  const auto t0 = Clock::now();
  for (uint64_t i = 0;; ++i) {
    if (comm->board.minFinished() >= calls) return true;
    if (faultPoll(comm) || faultPending(comm)) {
      *interrupted = comm->board.minFinished() < calls;
      return !*interrupted;
    }
    if (deadline.expired()) return false;
    if (i % 4096 == 4095 && comm->board.goneBehind(calls) >= 0) return false;  // the call's own wait names it
    if (i < uint64_t(policy.yields)) {
      sched_yield();
    } else if (std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count() >= policy.spinHere()) {
      usleep(50);
    }
  }
}

// Until bytes more fit the budget: with the board, waits for the calls before seq to be
// finished everywhere; without, lets the oldest go. False: they do not fit.
bool roomFor(snclComm* comm, uint64_t seq, size_t bytes, bool* interrupted) {
  CallHistory& h = comm->history;
  *interrupted = false;
  if (h.arena.held() + bytes <= h.budget) return true;
  if (comm->board.active()) {
    waitFinished(comm, seq, interrupted);
    releaseFinished(comm);
    return h.arena.held() + bytes <= h.budget;
  }
  while (h.arena.held() && h.arena.held() + bytes > h.budget) {
    popOldest(h);
    ++h.stats.dropped;
  }
  return h.arena.held() + bytes <= h.budget;
}

// The slot of call seq held the call kKeptCalls back: it is reused once that call is
// finished everywhere (the board: wait), or let go.
void freeSlot(snclComm* comm, uint64_t seq, bool* interrupted) {
  CallHistory& h = comm->history;
  CallRecord& slot = h.calls[seq % kKeptCalls];
  if (!slot.valid || slot.seq == seq) return;
  if (comm->board.active()) {
    waitFinished(comm, slot.seq + 1, interrupted);
    releaseFinished(comm);
  }
  if (slot.valid) {
    if (slot.hasInput && slot.bytes) ++h.stats.dropped;
    release(h, slot.seq + 1);  // the oldest call a rank can hold
  }
}

// Copies bytes of input into the arena for rec; false: no room there.
bool copyIn(CallHistory& h, CallRecord& rec, const void* input, size_t bytes) {
  rec.bytes = bytes;
  rec.offset = 0;
  if (bytes && !h.arena.push(bytes, &rec.offset)) {
    rec.bytes = 0;
    return false;
  }
  if (bytes) memcpy(h.arena.at(rec.offset), input, bytes);
  rec.hasInput = true;
  ++h.stats.kept;
  h.stats.peakHeld = std::max(h.stats.peakHeld, h.arena.held());
  return true;
}

// Every rank finished call seq: neither it nor anything before it is needed.
bool everyoneFinished(snclComm* comm, uint64_t seq) {
  if (!comm->board.active() || comm->board.minFinished() <= seq) return false;
  release(comm->history, seq + 1);
  ++comm->history.stats.skipped;
  return true;
}

}  // namespace

void historyInit(snclComm* comm, size_t configBudget) {
  CallHistory& h = comm->history;
  h.budget = configBudget ? configBudget : env::bytes("SNCL_MEM_BUDGET", kDefaultMemBudget);
  // Twice the budget of address space: a fault round that comes while a rank waits for room
  // lets it keep an in-place input past the budget, for that round's re-run.
  if (comm->fault.retry) h.arena.setCapacity(2 * h.budget);
}

void keepStart(snclComm* comm, const CollOp& op, const Plan& plan, const CollShape& shape, const ExecArgs& args) {
  if (!comm->fault.retry) return;
  CallHistory& h = comm->history;
  const uint64_t seq = args.seq;
  releaseFinished(comm);
  bool interrupted = false;
  freeSlot(comm, seq, &interrupted);
  const size_t bytes = inputBytes(op, args, comm->nranks);
  const bool copy = inPlace(op, args, comm->nranks);
  // In place with calls held: wait for them to be finished everywhere rather than hold two
  // inputs (the call waits for its peers anyway); small calls just keep both.
  if (copy && !interrupted && h.arena.held() && bytes >= kWaitInPlaceBytes && comm->board.active()) {
    waitFinished(comm, seq, &interrupted);
    releaseFinished(comm);
  }
  // A fault round during a wait: keep the input anyway, past the budget, for its re-run.
  bool room = false;
  if (copy && bytes <= h.budget) {
    if (!interrupted) room = roomFor(comm, seq, bytes, &interrupted);
    room = room || interrupted;
    if (room && h.arena.held() + bytes > h.budget) ++h.stats.overBudget;
  }
  CallRecord& rec = h.calls[seq % kKeptCalls];
  rec.hasInput = false;
  rec.seq = seq;
  rec.op = op;
  rec.plan = plan;
  rec.shape = shape;
  rec.shape.layout = rec.op.layout.empty() ? nullptr : rec.op.layout.data();  // the caller's copy goes away
  rec.args = args;
  rec.bytes = 0;
  rec.valid = true;
  if (!copy || (room && copyIn(h, rec, args.input, bytes))) return;
  ++h.stats.notKept;
  log::info(log::Subsys::Fault, "comm {} rank {}: in-place call #{} ({}) is not kept: {}; a fault in it fails the call",
            comm->name, comm->rank, seq + 1, sizeText(bytes),
            bytes > h.budget ? fmt::format("larger than the retry budget SNCL_MEM_BUDGET={}", sizeText(h.budget))
                             : std::string("no room within the retry budget"));
}

Result keepFinished(snclComm* comm, const CollOp& op, const ExecArgs& args, bool* interrupted) {
  *interrupted = false;
  const uint64_t seq = args.seq;
  if (comm->board.active()) comm->board.publish(seq + 1);
  if (!comm->fault.retry) return snclSuccess;
  CallHistory& h = comm->history;
  if (comm->board.active()) releaseFinished(comm);
  else if (fromEveryRank(op) && comm->nranks > 1) release(h, seq);
  CallRecord& rec = h.calls[seq % kKeptCalls];
  if (!rec.valid || rec.seq != seq || rec.hasInput) return snclSuccess;
  if (everyoneFinished(comm, seq)) return snclSuccess;
  const size_t bytes = inputBytes(op, args, comm->nranks);
  if (bytes <= h.budget) {
    const bool room = roomFor(comm, seq, bytes, interrupted);
    if (everyoneFinished(comm, seq)) {
      *interrupted = false;  // a round for a later call: this rank joins it there
      return snclSuccess;
    }
    if (room && copyIn(h, rec, args.input, bytes)) return snclSuccess;
    // A fault round came: this rank takes part as one still in the call, whose input is
    // still the caller's.
    if (*interrupted) return snclSuccess;
  }
  if (comm->board.active()) {
    // Not kept: the caller's input stays until every rank is past the call.
    if (waitFinished(comm, seq + 1, interrupted)) {
      release(h, seq + 1);
      ++h.stats.skipped;
      return snclSuccess;
    }
    if (*interrupted) return snclSuccess;
    const std::vector<int> late = comm->board.behind(seq + 1);
    return fail(snclTimeout, "comm {} rank {}: rank(s) {} did not finish call #{} within the deadline ({} ms) while "
                "this rank waited to let go of its input ({}, more than the retry budget SNCL_MEM_BUDGET={} holds)",
                comm->name, comm->rank, fmt::join(late, ", "), seq + 1, comm->timeoutMs, sizeText(bytes),
                sizeText(h.budget));
  }
  ++h.stats.notKept;
  log::info(log::Subsys::Fault, "comm {} rank {}: call #{} ({}) is not kept: more than the retry budget "
            "SNCL_MEM_BUDGET={} holds; a fault that finds a rank still in it fails", comm->name, comm->rank, seq + 1,
            sizeText(bytes), sizeText(h.budget));
  return snclSuccess;
}

const char* keptInput(snclComm* comm, uint64_t seq) {
  CallRecord& rec = comm->history.calls[seq % kKeptCalls];
  if (!rec.valid || rec.seq != seq || !rec.hasInput) return nullptr;
  return rec.bytes ? comm->history.arena.at(rec.offset) : "";
}

uint64_t oldestKept(const snclComm* comm, uint64_t seq) {
  uint64_t oldest = seq;
  while (oldest > 0 && seq - oldest < uint64_t(kKeptCalls) - 1) {
    const CallRecord& rec = comm->history.calls[(oldest - 1) % kKeptCalls];
    if (!rec.valid || !rec.hasInput || rec.seq != oldest - 1) break;
    --oldest;
  }
  return oldest;
}

}  // namespace sncl
