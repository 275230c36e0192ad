#include "lib/exec/executor.h"

#include <algorithm>
#include <cstring>

#include "lib/base/clock.h"
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

}  // namespace

Executor::Executor(int rank, std::vector<Transport*> transportOfPeer, int64_t timeoutMs)
    : rank_(rank), transportOfPeer_(std::move(transportOfPeer)), timeoutMs_(timeoutMs) {
  for (Transport* t : transportOfPeer_)
    if (t && std::find(transports_.begin(), transports_.end(), t) == transports_.end()) transports_.push_back(t);
  pending_.reserve(64);
  sinks_.reserve(64);
}

void Executor::deliverCopy(void* ctx, size_t offset, const void* data, size_t bytes) {
  auto* t = static_cast<SinkTarget*>(ctx);
  memcpy(t->dst + offset, data, bytes);
}

void Executor::deliverReduce(void* ctx, size_t offset, const void* data, size_t bytes) {
  auto* t = static_cast<SinkTarget*>(ctx);
  t->reduce(t->dst + offset, t->src + offset, data, bytes / t->elemSize);
}

Result Executor::post(uint32_t index, const algo::Op& op, const ExecArgs& args, SinkTarget* sink) {
  const size_t bytes = op.count * args.elemSize;
  const uint64_t tag = (args.seq << 32) | op.tag;
  if (op.kind == algo::OpKind::Copy || op.kind == algo::OpKind::Reduce) {
    char* dst = bufferOf(op.dstBuf, args) + op.dst * args.elemSize;
    const char* src = bufferOf(op.srcBuf, args) + op.src * args.elemSize;
    if (op.kind == algo::OpKind::Reduce) args.reduce(dst, dst, src, op.count);
    else if (dst != src) memcpy(dst, src, bytes);
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
    *sink = {bufferOf(op.dstBuf, args) + op.dst * args.elemSize, nullptr, args.reduce, args.elemSize};
    RecvSink s{deliverCopy, sink};
    if (op.kind == algo::OpKind::RecvReduce) {
      sink->src = bufferOf(op.srcBuf, args) + op.src * args.elemSize;
      s.deliver = deliverReduce;
    }
    SNCL_CHECK(t->irecv(op.peer, tag, bytes, s, &req));
  }
  pending_.push_back({t, req, op.peer, index});
  return snclSuccess;
}

Result Executor::run(const algo::Schedule& schedule, const ExecArgs& args) {
  interrupted_ = false;
  failedPeer_ = -1;
  for (size_t step = 0; step < schedule.numSteps(); ++step) {
    const uint32_t begin = schedule.stepBegin(step), end = schedule.stepEnd[step];
    pending_.clear();
    sinks_.resize(std::max<size_t>(sinks_.size(), end - begin));
    for (uint32_t i = begin; i < end; ++i) {
      Result r = post(i, schedule.ops[i], args, &sinks_[i - begin]);
      if (r != snclSuccess) return r;
    }
    SNCL_CHECK(waitAll(step, args.opDone));
  }
  return snclSuccess;
}

Result Executor::waitAll(size_t stepIndex, uint8_t* opDone) {
  Deadline deadline = Deadline::afterMs(timeoutMs_);
  Deadline slow = Deadline::afterMs(timeoutMs_ / 4);
  bool stalled = false;
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
      idle = 0;
      deadline = Deadline::afterMs(timeoutMs_);
      slow = Deadline::afterMs(timeoutMs_ / 4);
      continue;
    }
    if (++idle < kSpinPolls) continue;
    if (interrupt_.check && interrupt_.check(interrupt_.ctx)) {
      interrupted_ = true;
      return snclRemoteError;
    }
    if (!stalled && slow.expired()) stalled = true;
    if (deadline.expired())
      return fail(snclTimeout, "rank {}: step {} made no progress for {} ms (waiting on peer {})", rank_,
                  stepIndex, timeoutMs_, pending_.front().peer);
    for (Transport* t : transports_) t->wait(transports_.size() == 1 ? kSleepMicros : kSleepMicros / 4);
  }
  return snclSuccess;
}

}  // namespace sncl
