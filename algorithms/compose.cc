#include "algorithms/compose.h"

#include <algorithm>

namespace sncl::algo {
namespace {

// Where (buf, offset) of the part lies in the comm-wide buffers.
Region place(const Placement& p, Buf buf, size_t offset) {
  if (buf == Buf::Input) return {p.input.buf, p.input.offset + offset};
  if (buf == Buf::Output) return {p.output.buf, p.output.offset + offset};
  return {Buf::Scratch, p.scratchOffset + offset};
}

}  // namespace

int localRankOf(const std::vector<int>& members, int rank) {
  auto it = std::find(members.begin(), members.end(), rank);
  return it == members.end() ? -1 : static_cast<int>(it - members.begin());
}

void appendPhase(const Schedule& part, const Placement& p, Schedule* out) {
  const uint32_t tagMask = (1u << kPhaseTagBits) - 1;
  out->endStep();  // ops the caller left open form a step of their own
  for (size_t step = 0; step < part.numSteps(); ++step) {
    for (uint32_t i = part.stepBegin(step); i < part.stepEnd[step]; ++i) {
      Op op = part.ops[i];
      const Region src = place(p, op.srcBuf, op.src), dst = place(p, op.dstBuf, op.dst);
      op.srcBuf = src.buf;
      op.src = src.offset;
      op.dstBuf = dst.buf;
      op.dst = dst.offset;
      if (op.peer >= 0) op.peer = p.members[op.peer];
      op.tag = phaseTagBase(p.phase) + (op.tag & tagMask);
      out->add(op);
    }
    out->endStep();
  }
  if (part.scratchCount) out->scratchCount = std::max(out->scratchCount, p.scratchOffset + part.scratchCount);
}

bool appendGroupPhase(int rank, const Placement& p, const PartBuilder& build, Schedule* out) {
  const int localRank = localRankOf(p.members, rank);
  if (localRank < 0) return false;
  Schedule part;
  build(localRank, static_cast<int>(p.members.size()), &part);
  appendPhase(part, p, out);
  return true;
}

}  // namespace sncl::algo
