#include "lib/comm/catch_up.h"

#include <cstring>

#include "lib/base/log.h"
#include "lib/comm/comm.h"

namespace sncl {

void keepCall(snclComm* comm, const CollOp& op, const Plan& plan, const CollShape& shape, const ExecArgs& args) {
  if (!comm->fault.retry) return;
  CallRecord& rec = comm->history.calls[args.seq % kKeptCalls];
  rec.valid = false;
  rec.seq = args.seq;
  rec.op = op;
  rec.plan = plan;
  rec.shape = shape;
  rec.shape.layout = rec.op.layout.empty() ? nullptr : rec.op.layout.data();  // the caller's copy goes away
  rec.args = args;
  // What the schedule reads: a pre-multiplied sum's scaled copy, an in-place input before
  // the call overwrites it.
  const size_t bytes = inputCount(op, comm->nranks) * args.elemSize;
  if (rec.input.size() < bytes) rec.input.resize(bytes);
  if (bytes && args.input) memcpy(rec.input.data(), args.input, bytes);
  rec.valid = true;
}

const char* keptInput(const snclComm* comm, uint64_t seq) {
  return comm->history.calls[seq % kKeptCalls].input.data();
}

uint64_t oldestKept(const snclComm* comm, uint64_t seq) {
  uint64_t oldest = seq;
  while (oldest > 0 && seq - oldest < uint64_t(kKeptCalls) - 1) {
    const CallRecord& rec = comm->history.calls[(oldest - 1) % kKeptCalls];
    if (!rec.valid || rec.seq != oldest - 1) break;
    --oldest;
  }
  return oldest;
}

void keptPlans(const snclComm* comm, uint64_t seq, const Plan* current, std::vector<std::pair<uint64_t, Plan>>* out) {
  out->clear();
  for (uint64_t s = oldestKept(comm, seq); s < seq; ++s) out->push_back({s, comm->history.calls[s % kKeptCalls].plan});
  if (current) out->push_back({seq, *current});
}

const Plan* pinnedPlan(const snclComm* comm, uint64_t seq) {
  const CallHistory& h = comm->history;
  if (h.pinned.empty() || seq > h.pinnedUntil) return nullptr;
  for (const auto& [s, plan] : h.pinned)
    if (s == seq) return &plan;
  return nullptr;
}

Result catchUp(snclComm* comm, const Decision& d, uint64_t seq) {
  CallHistory& h = comm->history;
  h.pinned = d.plans;
  h.pinnedUntil = d.highSeq;
  for (uint64_t s = d.catchUpSeq; s < seq; ++s) {
    CallRecord& rec = h.calls[s % kKeptCalls];
    if (!rec.valid || rec.seq != s)
      return fail(snclInternalError, "rank {}: asked to replay call #{} but did not keep it", comm->rank, s + 1);
    comm->planner->build(rec.plan, rec.shape, &h.schedule);
    const size_t scratchBytes = h.schedule.scratchCount * rec.args.elemSize;
    const size_t outBytes = outputCount(rec.op, comm->nranks) * rec.args.elemSize;
    if (h.scratch.size() < scratchBytes) h.scratch.resize(scratchBytes);
    if (h.sink.size() < outBytes) h.sink.resize(outBytes);
    ExecArgs args = rec.args;
    args.input = rec.input.data();
    args.output = h.sink.data();  // this rank's result of the call stands: it returned it
    args.scratch = h.scratch.data();
    const Result r = comm->executor->run(h.schedule, args);
    if (r != snclSuccess)
      return fail(r, "comm {} rank {}: replaying call #{} for ranks still in it failed: {}", comm->name, comm->rank,
                  s + 1, lastError());
    log::info(log::Subsys::Fault, "comm {} rank {}: replayed call #{} ({}) for the ranks still in it", comm->name,
              comm->rank, s + 1, collName(rec.op.coll));
  }
  return snclSuccess;
}

}  // namespace sncl
