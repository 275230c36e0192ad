#include "lib/comm/cells_path.h"

#include <bit>

#include "lib/base/env.h"
#include "lib/base/log.h"
#include "lib/comm/catch_up.h"
#include "lib/comm/comm.h"
#include "lib/exec/cells.h"
#include "lib/exec/executor.h"

namespace sncl {
namespace {

bool cellsColl(CollType c, CellsColl* out) {
  switch (c) {
    case CollType::AllReduce: *out = CellsColl::AllReduce; return true;
    case CollType::AllGather: *out = CellsColl::AllGather; return true;
    case CollType::Broadcast: *out = CellsColl::Broadcast; return true;
    case CollType::Reduce: *out = CellsColl::Reduce; return true;
    default: return false;
  }
}

bool interruptThunk(void* ctx) {
  return faultPoll(static_cast<snclComm*>(ctx));
}

}  // namespace

void cellsInit(snclComm* comm) {
  CellsPath& c = comm->cells;
  c = CellsPath{};
  if (comm->nranks < 2) return;
  Transport* found = nullptr;
  for (auto& t : comm->transports)
    if (t->localCells()) found = t.get();
  if (!found) return;  // the transports say why (shm: "cells off")
  // A forced algorithm is the user's choice to measure or to work around: honour it.
  const std::string algo = env::str("SNCL_ALGO").value_or("");
  if (!algo.empty()) {
    if (comm->rank == 0)
      log::info(log::Subsys::Plan, "comm {}: cells path off: SNCL_ALGO={} forces the planner's algorithms", comm->name,
                algo);
    return;
  }
  c.transport = found;
  if (comm->rank == 0)
    log::info(log::Subsys::Plan,
              "comm {}: AllReduce, AllGather, Broadcast and Reduce of up to {} bytes per rank run on the {} "
              "transport's cells (algorithm \"cells\"), not the planner's schedule",
              comm->name, found->localCells()->cellBytes(), found->name());
}

bool cellsTake(snclComm* comm, const CollOp& op, uint64_t seq) {
  CellsPath& c = comm->cells;
  CellsColl coll;
  if (!c.transport || !cellsColl(op.coll, &coll)) return false;
  LocalCells* cells = c.transport->localCells();
  if (!cells || !cellsFit(*cells, op.count * dtypeSize(op.dtype))) return false;
  return pinnedPlan(comm, seq) == nullptr;
}

Result cellsRun(snclComm* comm, const CollOp& op, const ExecArgs& args, bool* interrupted) {
  CellsPath& c = comm->cells;
  LocalCells* cells = c.transport->localCells();
  if (!cells) return fail(snclInternalError, "comm {} rank {}: the cells are gone", comm->name, comm->rank);
  CellsCall call;
  cellsColl(op.coll, &call.coll);
  call.input = args.input;  // the scaled copy for a pre-multiplied sum
  call.output = args.output;
  call.elemSize = args.elemSize;
  call.bytes = op.count * args.elemSize;
  call.reduce = args.reduce;
  call.root = op.root;
  call.typeOp = uint32_t(op.dtype) | uint32_t(op.op) << 8;
  CellsWait wait;
  wait.timeoutMs = comm->timeoutMs;
  wait.interrupt = interruptThunk;
  wait.ctx = comm;
  const Executor::WaitHook hook = comm->executor->waitHook();
  wait.hook = hook.fn;
  wait.hookUser = hook.user;
  const size_t bucket = std::bit_width(call.bytes);
  if (!(c.loggedBuckets & (uint64_t{1} << bucket))) {
    c.loggedBuckets |= uint64_t{1} << bucket;
    log::info(log::Subsys::Plan, "comm {} rank {}: {} of {} bytes per rank: algorithm cells (shared-memory cells)",
              comm->name, comm->rank, cellsCollName(call.coll), call.bytes);
  }
  ++c.calls;
  return runCells(*cells, comm->rank, comm->nranks, call, wait, interrupted);
}

}  // namespace sncl
