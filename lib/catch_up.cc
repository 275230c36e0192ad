#include "lib/catch_up.h"

#include <cstring>

#include "lib/comm.h"
#include "lib/log.h"

namespace sncl {

bool sameOutputEverywhere(CollType coll) {
  return coll == CollType::AllReduce || coll == CollType::AllGather || coll == CollType::Broadcast;
}

void recordCall(snclComm* comm, const CollOp& op, const Plan& plan, const CollShape& shape, const ExecArgs& args) {
  CallRecord& rec = comm->lastCall;
  rec.valid = false;
  if (!comm->fault.retry) return;
  rec.seq = args.seq;
  rec.op = op;
  rec.plan = plan;
  rec.shape = shape;
  rec.args = args;
  rec.forward = sameOutputEverywhere(op.coll);
  // The output as the caller got it (an average scaled), or the input the schedule read
  // (a pre-multiplied sum's scaled copy).
  const size_t bytes = (rec.forward ? outputCount(op, comm->nranks) : inputCount(op, comm->nranks)) * args.elemSize;
  if (rec.data.size() < bytes) rec.data.resize(bytes);
  if (bytes) memcpy(rec.data.data(), rec.forward ? op.output : args.input, bytes);
  rec.valid = true;
}

bool recordServes(const snclComm* comm, uint64_t seq) {
  return seq > 0 && comm->lastCall.valid && comm->lastCall.seq == seq - 1;
}

namespace {

bool isLaggard(const Decision& d, int rank) {
  for (int r : d.laggards)
    if (r == rank) return true;
  return false;
}

}  // namespace

Result serveCatchUp(snclComm* comm, const Decision& d) {
  CallRecord& rec = comm->lastCall;
  if (!rec.valid || rec.seq != d.catchUpSeq)
    return fail(snclInternalError, "rank {}: asked to catch up call #{} but kept call #{}", comm->rank,
                d.catchUpSeq + 1, rec.valid ? rec.seq + 1 : 0);
  if (isLaggard(d, comm->rank)) return fail(snclInternalError, "rank {}: a laggard asked to serve", comm->rank);
  const size_t outBytes = outputCount(rec.op, comm->nranks) * rec.args.elemSize;
  algo::Schedule& s = rec.schedule;
  ExecArgs args = rec.args;
  if (rec.forward) {
    if (comm->rank != d.forwarder) return snclSuccess;
    // One step: the kept output to every laggard, as bytes.
    s.clear();
    for (int r : d.laggards) s.add({algo::OpKind::Send, algo::Buf::Input, algo::Buf::Input, r, 0, 0, 0, outBytes});
    s.endStep();
    args.input = rec.data.data();
    args.output = nullptr;
    args.scratch = nullptr;
    args.elemSize = 1;
  } else {
    comm->planner->build(rec.plan, rec.shape, &s);
    const size_t scratchBytes = s.scratchCount * rec.args.elemSize;
    if (rec.scratch.size() < scratchBytes) rec.scratch.resize(scratchBytes);
    if (rec.sink.size() < outBytes) rec.sink.resize(outBytes);
    args.input = rec.data.data();
    args.output = rec.sink.data();  // this rank's result of the call stands: it returned it
    args.scratch = rec.scratch.data();
  }
  const Result r = comm->executor->run(s, args);
  if (r != snclSuccess)
    return fail(r, "comm {} rank {}: helping ranks still in call #{} failed: {}", comm->name, comm->rank,
                d.catchUpSeq + 1, lastError());
  log::info(log::Subsys::Fault, "comm {} rank {}: {} call #{} for rank(s) still in it", comm->name, comm->rank,
            rec.forward ? "forwarded the result of" : "re-ran", d.catchUpSeq + 1);
  return snclSuccess;
}

Result receiveForwarded(snclComm* comm, const CollOp& op, const ExecArgs& args, const Decision& d) {
  const size_t outBytes = outputCount(op, comm->nranks) * args.elemSize;
  algo::Schedule& s = comm->lastCall.schedule;  // not kept across calls: free to reuse
  s.clear();
  s.add({algo::OpKind::Recv, algo::Buf::Output, algo::Buf::Output, d.forwarder, 0, 0, 0, outBytes});
  s.endStep();
  ExecArgs a = args;
  a.input = nullptr;
  a.scratch = nullptr;
  a.elemSize = 1;
  const Result r = comm->executor->run(s, a);
  if (r != snclSuccess)
    return fail(r, "comm {} rank {}: receiving the result of call #{} from rank {} failed: {}", comm->name,
                comm->rank, args.seq + 1, d.forwarder, lastError());
  return snclSuccess;
}

}  // namespace sncl
