#include "lib/exec/executor.h"

#include <algorithm>
#include <cstring>

#include <sched.h>

#include "lib/base/clock.h"
#include "lib/base/copy.h"
#include "lib/base/log.h"

namespace sncl {
namespace {

char* bufferOf(algo::Buf b, const ExecArgs& a) {
  switch (b) {
    case algo::Buf::Input: return static_cast<char*>(const_cast<void*>(a.input));
    case algo::Buf::Output: return static_cast<char*>(a.output);
    case algo::Buf::Scratch: return static_cast<char*>(a.scratch);
    default: return static_cast<char*>(a.userBuffers[algo::userBufIndex(b)]);
  }
}

// Polls this many times without a completion before sleeping in the transport: short,
// because 8 ranks share 2 cores and a spinning rank steals its peer's time slice.
constexpr int kSpinPolls = 64;
constexpr int64_t kSleepMicros = 200;
// A wait over two transports (shm inside the host, ofi between) cannot sleep on both: a rank
// asleep on one misses the other's bytes for the whole sleep. With more ranks than cores it
// yields between polls instead, as MPI does, this long before sleeping in turns (8 ranks
// of 2 hosts on 2 cores: a 512 B All-Reduce 880 -> 380-470 us, perf/README.md).
constexpr int64_t kYieldPollMicros = 1000;
// Sequence numbers from here up are not a collective's (point-to-point tags carry 2^32-1).
constexpr uint64_t kNoCallSeq = 0xffffffffu;

}  // namespace

Executor::Executor(int rank, std::vector<Transport*> transportOfPeer, int64_t timeoutMs, WaitPolicy wait)
    : rank_(rank), transportOfPeer_(std::move(transportOfPeer)), timeoutMs_(timeoutMs) {
  for (Transport* t : transportOfPeer_)
    if (t && std::find(transports_.begin(), transports_.end(), t) == transports_.end()) transports_.push_back(t);
  yieldPolls_ = wait.yields > 0 && transports_.size() > 1;
  pending_.reserve(64);
  sinks_.reserve(64);
}

void Executor::deliverCopy(void* ctx, size_t offset, const void* data, size_t bytes) {
  auto* t = static_cast<SinkTarget*>(ctx);
  copyCached(t->dst + offset, data, bytes);
  count(t->exec->bytesCopied_, bytes);
}

void Executor::deliverReduce(void* ctx, size_t offset, const void* data, size_t bytes) {
  auto* t = static_cast<SinkTarget*>(ctx);
  t->reduce(t->dst + offset, t->src + offset, data, bytes / t->elemSize);
  count(t->exec->bytesReduced_, bytes);
}

Result Executor::post(uint32_t index, const algo::Op& op, const ExecArgs& args, SinkTarget* sink) {
  const size_t bytes = op.count * args.elemSize;
  const uint64_t tag = (((args.seq ^ (uint64_t(args.signature & 0xffffffu) << 8)) & 0xffffffffu) << 32) | op.tag;
  if (op.kind == algo::OpKind::Copy || op.kind == algo::OpKind::Reduce) {
    char* dst = bufferOf(op.dstBuf, args) + op.dst * args.elemSize;
    const char* src = bufferOf(op.srcBuf, args) + op.src * args.elemSize;
    if (op.kind == algo::OpKind::Reduce) {
      args.reduce(dst, dst, src, op.count);
      count(bytesReduced_, bytes);
    } else if (dst != src) {
      copyCached(dst, src, bytes);
      count(bytesCopied_, bytes);
    }
    if (args.opDone) args.opDone[index] = 1;
    return snclSuccess;
  }
  if (op.peer < 0 || op.peer >= static_cast<int>(transportOfPeer_.size()) || op.peer == rank_ ||
      !transportOfPeer_[op.peer])
    return fail(snclInternalError, "schedule names peer {} that rank {} has no transport for", op.peer, rank_);
  Transport* t = transportOfPeer_[op.peer];
  RequestId req = 0;
  if (op.kind == algo::OpKind::Send) {
    SNCL_CHECK(t->isend(op.peer, tag, bufferOf(op.srcBuf, args) + op.src * args.elemSize, bytes, &req));
  } else {
    *sink = {bufferOf(op.dstBuf, args) + op.dst * args.elemSize, nullptr, args.reduce, args.elemSize, this};
    // A plain receive into contiguous memory: a transport may write it there itself.
    RecvSink s{deliverCopy, sink, sink->dst};
    if (op.kind == algo::OpKind::RecvReduce) {
      sink->src = bufferOf(op.srcBuf, args) + op.src * args.elemSize;
      s.deliver = deliverReduce;
      s.dst = nullptr;
    }
    SNCL_CHECK(t->irecv(op.peer, tag, bytes, s, &req));
  }
  pending_.push_back({t, req, op.peer, index});
  return snclSuccess;
}

Result Executor::run(const algo::Schedule& schedule, const ExecArgs& args) {
  interrupted_ = false;
  failedPeer_ = -1;
  struct ClearWait {  // however the run ends, it waits on nobody afterwards
    std::atomic<int32_t>& peer;
    ~ClearWait() { peer.store(-1, std::memory_order_relaxed); }
  } clearWait{waitPeer_};
  steps_.store(static_cast<uint32_t>(schedule.numSteps()), std::memory_order_relaxed);
  int64_t startNs = trace_ ? trace::nowNs() : 0;  // a step starts when the one before ended
  for (size_t step = 0; step < schedule.numSteps(); ++step) {
    step_.store(static_cast<uint32_t>(step), std::memory_order_relaxed);
    const uint32_t begin = schedule.stepBegin(step), end = schedule.stepEnd[step];
    pending_.clear();
    sinks_.resize(std::max<size_t>(sinks_.size(), end - begin));
    for (uint32_t i = begin; i < end; ++i) {
      Result r = post(i, schedule.ops[i], args, &sinks_[i - begin]);
      if (r != snclSuccess) return r;
    }
    SNCL_CHECK(waitAll(step, args.opDone));
    if (trace_) startNs = recordStep(schedule, step, args.seq, args.elemSize, startNs);
  }
  return snclSuccess;
}

// One event per step with its operations summed up: an event per operation would cost
// as much as the small steps it describes. A peer is -2 when the step has several.
int64_t Executor::recordStep(const algo::Schedule& schedule, size_t step, uint64_t seq, size_t elemSize, int64_t startNs) {
  const int64_t endNs = trace::nowNs();
  trace::Event e{};
  e.kind = static_cast<uint8_t>(trace::Kind::Step);
  e.role = static_cast<uint8_t>(trace::threadRole());
  e.tid = trace::threadId();
  e.startNs = startNs;
  e.durNs = endNs - startNs;
  // A collective's own number (a replay after a fault runs an older call's), else the call's.
  e.seq = seq < kNoCallSeq ? seq : trace_->callSeq();
  e.i[0] = static_cast<int32_t>(step);
  e.i[1] = static_cast<int32_t>(schedule.numSteps());
  e.i[2] = e.i[3] = -1;
  uint64_t counts[4] = {};  // sends, receives, reductions, copies
  for (uint32_t k = schedule.stepBegin(step); k < schedule.stepEnd[step]; ++k) {
    const algo::Op& op = schedule.ops[k];
    const uint64_t bytes = op.count * elemSize;
    switch (op.kind) {
      case algo::OpKind::Send:
        ++counts[0];
        e.u[0] += bytes;
        e.i[2] = e.i[2] == -1 || e.i[2] == op.peer ? op.peer : -2;
        break;
      case algo::OpKind::Recv:
      case algo::OpKind::RecvReduce:
        ++counts[1];
        if (op.kind == algo::OpKind::RecvReduce) ++counts[2];  // a receive and a reduction
        e.u[1] += bytes;
        e.i[3] = e.i[3] == -1 || e.i[3] == op.peer ? op.peer : -2;
        break;
      case algo::OpKind::Reduce: ++counts[2]; break;
      default: ++counts[3]; break;
    }
  }
  for (int k = 0; k < 4; ++k) e.u[2] |= std::min<uint64_t>(counts[k], 0xffff) << (48 - 16 * k);
  trace_->push(e);
  return endNs;
}

Result Executor::waitAll(size_t stepIndex, uint8_t* opDone) {
  // The deadlines are set when the wait stops spinning (told): a step done within its spins,
  // as a small call's are, reads no clock.
  Deadline deadline, slow, yieldUntil;
  bool stalled = false, told = false;  // told: waitPeer_ names this wait, the deadlines run
  int idle = 0;
  while (!pending_.empty()) {
    bool progressed = false;
    for (size_t i = 0; i < pending_.size();) {
      bool done = false;
      Result r = pending_[i].transport->test(pending_[i].req, &done);
      if (r != snclSuccess) {
        failedPeer_ = pending_[i].peer;
        return r;
      }
      if (done) {
        if (opDone) opDone[pending_[i].op] = 1;
        pending_[i] = pending_.back();
        pending_.pop_back();
        progressed = true;
      } else {
        ++i;
      }
    }
    if (progressed) {
      if (stalled) {
        ++stalls_;
        log::info(log::Subsys::Fault, "rank {}: step {} went on after waiting over {} ms (a slow link or peer)", rank_,
                  stepIndex, timeoutMs_ / 4);
      }
      stalled = false;
      if (told) waitPeer_.store(-1, std::memory_order_relaxed), told = false;
      idle = 0;
      continue;
    }
    if (++idle < kSpinPolls) continue;
    if (!told) {
      deadline = Deadline::afterMs(timeoutMs_);
      slow = Deadline::afterMs(timeoutMs_ / 4);
      if (yieldPolls_) yieldUntil = Deadline::afterUs(kYieldPollMicros);
      waitSinceNs_.store(trace::coarseNowNs(), std::memory_order_relaxed);
      waitPeer_.store(pending_.front().peer, std::memory_order_relaxed);
      told = true;
    }
    if (waitHook_.fn) waitHook_.fn(waitHook_.user);
    if (interrupt_.check && interrupt_.check(interrupt_.ctx)) {
      interrupted_ = true;
      return snclRemoteError;
    }
    if (!stalled && slow.expired()) stalled = true;
    if (deadline.expired())
      return fail(snclTimeout, "rank {}: step {} made no progress for {} ms (waiting on peer {})", rank_,
                  stepIndex, timeoutMs_, pending_.front().peer);
    if (yieldPolls_ && !yieldUntil.expired()) {
      sched_yield();
      continue;
    }
    for (Transport* t : transports_) t->wait(transports_.size() == 1 ? kSleepMicros : kSleepMicros / 4);
  }
  return snclSuccess;
}

}  // namespace sncl
