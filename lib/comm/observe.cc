#include "lib/comm/observe.h"

#include <algorithm>
#include <cstring>

#include "lib/base/env.h"
#include "lib/base/log.h"
#include "lib/comm/comm.h"
#include "lib/comm/fault.h"
#include "lib/exec/reduce.h"

namespace sncl {
namespace {

// 18 MiB per rank, committed at init: 17k calls of an 8-rank 1 MiB All-Reduce (15 events).
constexpr uint64_t kDefaultTraceEvents = 1u << 18;

// The seqlock of the status, for its one writer: the version is odd while the fields
// change. Fields are stored with release (so a reader that sees one sees the odd version
// too) and read with acquire; no fences, which TSan does not model. Plain stores on x86.
void writeBegin(Observation& o) { o.version.store(o.version.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
void writeEnd(Observation& o) { o.version.store(o.version.load(std::memory_order_relaxed) + 1, std::memory_order_release); }
constexpr auto kField = std::memory_order_release;

// The interned description of plan (the comm keeps a handful: one per plan that ran).
int32_t planIndex(snclComm* comm, const Plan& plan) {
  auto& names = comm->obs.planNames;
  for (size_t i = 0; i < names.size(); ++i) {
    const PlanName& n = names[i];
    if (n.coll == plan.coll && n.algorithm == plan.algorithm && n.variant == plan.variant() &&
        n.chunkBytes == plan.chunkBytes)
      return int32_t(i);
  }
  names.push_back({plan.coll, plan.algorithm, plan.variant(), plan.chunkBytes, comm->planner->describe(plan)});
  return int32_t(names.size() - 1);
}

}  // namespace

CallObserver::CallObserver(snclComm* comm, const CollOp& op, bool onStream) : comm_(comm) {
  begin(static_cast<uint8_t>(op.coll), op.count * dtypeSize(op.dtype), onStream);
  if (!detailed_) return;
  dtype_ = static_cast<uint8_t>(op.dtype);
  op_ = op.preMul ? -1 : int32_t(op.op);
  call_.name = collName(op.coll);
  call_.count = op.count;
  call_.datatype = op.dtype;
  call_.op = op.preMul ? snclSum : op.op;
  call_.root = hasRoot(op.coll) ? op.root : -1;
  call_.bytes = op.count * dtypeSize(op.dtype);
}

CallObserver::CallObserver(snclComm* comm, const GroupTask* tasks, size_t n) : comm_(comm) {
  begin(kSendRecvColl, 0, n && tasks[0].stream);
  if (!detailed_) return;
  uint32_t sends = 0, recvs = 0;
  size_t bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    const CollOp& op = tasks[i].op;
    if (!isPointToPoint(op.coll)) continue;
    ++(op.coll == CollType::Send ? sends : recvs);
    bytes += op.count * dtypeSize(op.dtype);
  }
  sendRecv_ = uint64_t(sends) << 32 | recvs;
  dtype_ = static_cast<uint8_t>(snclUint8);
  call_.name = kSendRecvName;
  call_.count = sends + recvs;
  call_.datatype = snclUint8;
  call_.op = snclSum;
  call_.root = -1;
  call_.bytes = bytes;
  call_.plan = "p2p";
  fireBegin();  // a group's sends and receives have no plan to wait for
}

void CallObserver::begin(uint8_t coll, size_t bytes, bool onStream) {
  Observation& o = comm_->obs;
  coll_ = coll;
  writeBegin(o);
  o.coll.store(coll, kField);
  o.seq.store(comm_->seq, kField);
  o.bytes.store(bytes, kField);
  o.startNs.store(trace::coarseNowNs(), kField);
  o.started.store(o.started.load(std::memory_order_relaxed) + 1, kField);  // one writer: no locked add
  writeEnd(o);
  if (comm_->executor) comm_->executor->resetProgress();
  detailed_ = o.profiling || o.trace;
  if (!detailed_) return;
  call_.seq = comm_->seq;
  if (o.trace) {
    startNs_ = trace::nowNs();
    o.trace->buffer.setCallSeq(comm_->seq);
  }
  if (o.trace && trace::threadRole() != trace::Role::GroupWorker)
    trace::setThreadRole(onStream ? trace::Role::Stream : trace::Role::Caller);
}

void CallObserver::planned(const Plan& plan) {
  if (!detailed_ || begun_) return;
  plan_ = planIndex(comm_, plan);
  call_.plan = comm_->obs.planNames[size_t(plan_)].text.c_str();
  fireBegin();
}

void CallObserver::planned(const char* path) {
  if (!detailed_ || begun_) return;
  call_.plan = path;
  fireBegin();
}

void CallObserver::fireBegin() {
  begun_ = true;
  const Observation& o = comm_->obs;
  if (o.profiling && o.profiler.callBegin) o.profiler.callBegin(o.profiler.user, comm_, &call_);
}

void CallObserver::end(Result r) {
  if (ended_) return;
  ended_ = true;
  Observation& o = comm_->obs;
  if (r != snclSuccess) {
    std::lock_guard<std::mutex> lock(o.errorMu);
    snprintf(o.lastError, sizeof(o.lastError), "%s", lastError());
  }
  writeBegin(o);
  o.endNs.store(trace::coarseNowNs(), kField);
  o.lastResult.store(r, kField);
  o.finished.store(o.finished.load(std::memory_order_relaxed) + 1, kField);
  writeEnd(o);
  if (!detailed_) return;
  if (!begun_) fireBegin();  // failed before its plan: the pair stays whole
  if (o.profiling && o.profiler.callEnd) o.profiler.callEnd(o.profiler.user, comm_, &call_, r);
  if (!o.trace) return;
  const int64_t endNs = trace::nowNs();
  trace::Event e{};
  e.kind = static_cast<uint8_t>(trace::Kind::Call);
  e.role = static_cast<uint8_t>(trace::threadRole());
  e.tid = trace::threadId();
  e.startNs = startNs_;
  e.durNs = endNs - startNs_;
  e.seq = call_.seq;
  e.u[0] = call_.count;
  e.u[1] = call_.bytes;
  e.u[2] = sendRecv_;
  e.i[0] = plan_;
  e.i[1] = op_;
  e.i[2] = r;
  e.i[3] = call_.root;
  e.b[0] = coll_;
  e.b[1] = dtype_;
  o.trace->buffer.push(e);
}

CallObserver::~CallObserver() {
  if (!ended_) end(snclSystemError);
}

void observeInit(snclComm* comm) {
  auto pattern = env::str("SNCL_TRACE");
  if (!pattern) return;
  uint64_t capacity = env::bytes("SNCL_TRACE_EVENTS", kDefaultTraceEvents);
  if (capacity == 0) {
    log::warn("SNCL_TRACE_EVENTS=0 records nothing; using {}", kDefaultTraceEvents);
    capacity = kDefaultTraceEvents;
  }
  comm->obs.trace = std::make_unique<TraceState>(capacity, *pattern);
  comm->obs.trace->rounds.reserve(16);
  if (comm->executor) comm->executor->setTrace(&comm->obs.trace->buffer);
  log::info(log::Subsys::Init, "comm {} rank {}: tracing up to {} events to {}", comm->name, comm->rank, capacity,
            tracePath(*pattern, comm->rank));
}

void observeRound(snclComm* comm, uint64_t seq, int64_t startNs, uint32_t round, const Decision& d, bool coordinated,
                  bool pulledIn) {
  Observation& o = comm->obs;
  o.rounds.store(comm->fault.stats.rounds, std::memory_order_relaxed);
  o.linksDown.store(uint32_t(comm->fault.lostLinks.size()), std::memory_order_relaxed);
  o.ranksLost.store(uint32_t(comm->fault.deadRanks.size()), std::memory_order_relaxed);
  TraceState* t = o.trace.get();
  if (!t) return;
  t->attempt = t->lastRoundSeq == seq ? t->attempt + 1 : 1;
  t->lastRoundSeq = seq;
  const topo::Graph& g = comm->topology->graph();
  RoundInfo info;
  info.agreed = d.message;
  for (uint32_t l : d.links) info.links += (info.links.empty() ? "" : ", ") + g.linkName(l);
  for (int r : d.deadRanks) info.ranksLost += (info.ranksLost.empty() ? "" : ", ") + std::to_string(r);
  t->rounds.push_back(std::move(info));
  trace::Event e{};
  e.kind = static_cast<uint8_t>(trace::Kind::Round);
  e.role = static_cast<uint8_t>(trace::threadRole());
  e.tid = trace::threadId();
  e.startNs = startNs;
  e.durNs = trace::nowNs() - startNs;
  e.seq = seq;
  e.u[0] = t->rounds.size() - 1;
  e.u[1] = comm->fault.attempt;
  e.i[0] = int32_t(round);
  e.i[1] = int32_t(d.verdict);
  e.i[2] = d.code;
  e.i[3] = t->attempt;
  e.b[0] = coordinated;
  e.b[1] = pulledIn;
  t->buffer.push(e);
}

// Reads the call's fields as one snapshot (a seqlock: the running call writes them without
// waiting for readers); the executor's step is read beside them, as it moves per step.
void observeStatus(snclComm* comm, snclCommStatus_t* out) {
  const Observation& o = comm->obs;
  *out = snclCommStatus_t{};
  uint8_t coll = 0;
  int64_t startNs = 0, endNs = 0;
  for (;;) {
    const uint64_t v1 = o.version.load(std::memory_order_acquire);
    if (v1 & 1) continue;  // a write is under way: a few stores, soon done
    out->callsStarted = o.started.load(std::memory_order_acquire);
    out->callsFinished = o.finished.load(std::memory_order_acquire);
    coll = o.coll.load(std::memory_order_acquire);
    out->seq = o.seq.load(std::memory_order_acquire);
    startNs = o.startNs.load(std::memory_order_acquire);
    endNs = o.endNs.load(std::memory_order_acquire);
    out->lastResult = snclResult_t(o.lastResult.load(std::memory_order_acquire));
    if (o.version.load(std::memory_order_relaxed) == v1) break;
  }
  out->inCall = out->callsStarted != out->callsFinished;
  if (out->callsStarted > 0) {
    const char* name = coll == kSendRecvColl ? kSendRecvName : collName(CollType(coll));
    snprintf(out->callName, sizeof(out->callName), "%s", name);
    out->elapsedUs = double((out->inCall ? trace::coarseNowNs() : endNs) - startNs) / 1000.0;
  }
  // The executor exists once init succeeded (a non-blocking init may still run).
  if (comm->initResult.load() == snclSuccess && comm->executor) comm->executor->progress(&out->step, &out->steps);
  out->faultRounds = o.rounds.load(std::memory_order_relaxed);
  out->linksDown = o.linksDown.load(std::memory_order_relaxed);
  out->ranksLost = o.ranksLost.load(std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(comm->obs.errorMu);
    snprintf(out->lastError, sizeof(out->lastError), "%s", o.lastError);
  }
}

}  // namespace sncl
