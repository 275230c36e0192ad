#include "lib/comm/catch_up.h"

#include <cstring>

#include "lib/base/log.h"
#include "lib/comm/comm.h"

namespace sncl {

void keptPlans(const snclComm* comm, uint64_t seq, const Plan* current, std::vector<std::pair<uint64_t, Plan>>* out) {
  out->clear();
  for (uint64_t s = oldestKept(comm, seq); s < seq; ++s) out->push_back({s, comm->history.calls[s % kKeptCalls].plan});
  if (current) out->push_back({seq, *current});
}

const Plan* pinnedPlan(const snclComm* comm, uint64_t seq) {
  const ReplayState& h = comm->replay;
  if (h.pinned.empty() || seq > h.pinnedUntil) return nullptr;
  for (const auto& [s, plan] : h.pinned)
    if (s == seq) return &plan;
  return nullptr;
}

Result catchUp(snclComm* comm, const Decision& d, uint64_t seq) {
  ReplayState& h = comm->replay;
  h.pinned = d.plans;
  h.pinnedUntil = d.highSeq;
  for (uint64_t s = d.catchUpSeq; s < seq; ++s) {
    const CallRecord& rec = comm->history.calls[s % kKeptCalls];
    const char* input = keptInput(comm, s);
    if (!rec.valid || rec.seq != s || !input)
      return fail(snclInternalError, "rank {}: asked to replay call #{} but did not keep it", comm->rank, s + 1);
    comm->planner->build(rec.plan, rec.shape, &h.schedule);
    const size_t scratchBytes = h.schedule.scratchCount * rec.args.elemSize;
    const size_t outBytes = outputCount(rec.op, comm->nranks) * rec.args.elemSize;
    if (h.scratch.size() < scratchBytes) h.scratch.resize(scratchBytes);
    if (h.sink.size() < outBytes) h.sink.resize(outBytes);
    ExecArgs args = rec.args;
    args.input = input;
    args.output = h.sink.data();  // this rank's result of the call stands: it returned it
    args.scratch = h.scratch.data();
    const Result r = comm->executor->run(h.schedule, args);
    if (r != snclSuccess)
      return fail(r, "comm {} rank {}: replaying call #{} for ranks still in it failed: {}", comm->name, comm->rank,
                  s + 1, lastError());
    log::info(log::Subsys::Fault, "comm {} rank {}: replayed call #{} ({}) for the ranks still in it", comm->name,
              comm->rank, s + 1, collName(rec.op.coll));
  }
  // Replays are rare: their buffers go (what the comm holds stays what its budget says).
  std::vector<char>().swap(h.scratch);
  std::vector<char>().swap(h.sink);
  return snclSuccess;
}

}  // namespace sncl
