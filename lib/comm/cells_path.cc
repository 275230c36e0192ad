#include "lib/comm/cells_path.h"

#include <fmt/format.h>

#include <bit>

#include "lib/base/env.h"
#include "lib/base/log.h"
#include "lib/comm/catch_up.h"
#include "lib/comm/comm.h"
#include "lib/exec/cells.h"
#include "lib/exec/executor.h"
#include "lib/exec/shared_colls.h"
#include "lib/topo/discovery.h"
#include "lib/transport/shared_mem.h"

namespace sncl {
namespace {

bool cellsColl(CollType c, CellsColl* out) {
  switch (c) {
    case CollType::AllReduce: *out = CellsColl::AllReduce; return true;
    case CollType::AllGather: *out = CellsColl::AllGather; return true;
    case CollType::Broadcast: *out = CellsColl::Broadcast; return true;
    case CollType::Reduce: *out = CellsColl::Reduce; return true;
    case CollType::ReduceScatter: *out = CellsColl::ReduceScatter; return true;
    default: return false;
  }
}

bool interruptThunk(void* ctx) {
  return faultPoll(static_cast<snclComm*>(ctx));
}

// A block of reduced results: small enough to stay in the first-level cache while every
// rank's input block is added to it, large enough that per-block work is noise.
constexpr size_t kScratchBytes = 32u << 10;
// A rank's staging area: four parts of 512 KiB, so that a chunk's copies are long next to
// its barriers (a few microseconds) and the area stays a small part of the cache.
constexpr size_t kStageBytes = 2u << 20;

CellsWait waitOf(snclComm* comm) {
  CellsWait wait;
  wait.timeoutMs = comm->timeoutMs;
  wait.policy = comm->threads.wait;
  wait.interrupt = interruptThunk;
  wait.ctx = comm;
  const Executor::WaitHook hook = comm->executor->waitHook();
  wait.hook = hook.fn;
  wait.hookUser = hook.user;
  return wait;
}

Result sharedRun(snclComm* comm, LocalCells& cells, const CollOp& op, const ExecArgs& args, bool stage,
                 bool* interrupted, bool* declined) {
  CellsPath& c = comm->cells;
  SharedCall call;
  cellsColl(op.coll, &call.coll);
  call.input = args.input;
  call.output = args.output;
  call.count = op.count;
  call.elemSize = args.elemSize;
  call.reduce = args.reduce;
  call.root = op.root;
  call.typeOp = uint32_t(op.dtype) | uint32_t(op.op) << 8;
  call.scratch = c.scratch.data();
  call.scratchBytes = c.scratch.size();
  call.cacheBytes = c.cacheBytes;
  // Every rank publishes whether it stages, and all decline alike if one does not
  // (lib/exec/shared_colls.h).
  const size_t bytes = op.count * args.elemSize;
  if (stage && !c.stage) {  // once per comm, at its first call that may stage
    void* area = nullptr;
    if (sharedAlloc(4 * c.stagePartBytes, &area) == snclSuccess) {
      c.stage.reset(static_cast<char*>(area));
    } else {
      log::warn("comm {} rank {}: no staging area ({}): calls on buffers peers cannot map run the planner's schedules",
                comm->name, comm->rank, lastError());
      c.stagePartBytes = 0;
    }
  }
  call.stage = stage ? c.stage.get() : nullptr;
  call.stagePartBytes = c.stagePartBytes;
  SharedMoved moved;
  comm->executor->setProgress(0, 2);  // the descriptors' round and the barrier
  bool staged = false;
  const Result r =
      runShared(cells, comm->rank, comm->nranks, call, waitOf(comm), interrupted, declined, &staged, &moved);
  comm->executor->countMoved(moved.copied, moved.reduced);
  const size_t bucket = std::bit_width(bytes);
  if (r == snclSuccess && !(c.loggedShared & (uint64_t{1} << bucket))) {
    c.loggedShared |= uint64_t{1} << bucket;
    log::info(log::Subsys::Plan, "comm {} rank {}: {} of {} bytes per rank: {}", comm->name, comm->rank,
              cellsCollName(call.coll), bytes,
              *declined ? (stage || c.stagePartBytes == 0
                               ? std::string("not every rank's buffers are shared (snclMemAlloc), nor staged: the "
                                             "planner's schedule")
                               : fmt::format("not every rank's buffers are shared (snclMemAlloc), and staging pays "
                                             "only up to {} bytes per rank with {} ranks (tuning: {}): the "
                                             "planner's schedule",
                                             comm->planner->model().tuning().stagedMaxAt(comm->nranks),
                                             comm->nranks, comm->planner->model().tuning().source))
              : staged ? std::string("algorithm staged (copied through the ranks' shared staging areas)")
                       : std::string("algorithm shared (peers' buffers read and written in place)"));
  }
  ++(*declined ? c.sharedDeclined : staged ? c.stagedCalls : c.sharedCalls);
  return r;
}

}  // namespace

void SharedFree::operator()(char* p) const {
  sharedFree(p);
}

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
  LocalCells* cells = found->localCells();
  if (comm->rank == 0)
    log::info(log::Subsys::Plan,
              "comm {}: AllReduce, AllGather, Broadcast and Reduce of up to {} bytes per rank run on the {} "
              "transport's cells (algorithm \"cells\"), not the planner's schedule",
              comm->name, cells->cellBytes(), found->name());
  // Every rank reads the same agreed values (the transport's agreement, the cell size,
  // nranks) and the same variable, which must match across ranks as SNCL_ALGO must.
  if (cells->sharedBuffers() && cells->cellBytes() >= sharedDescBytes() && comm->nranks <= kSharedMaxRanks) {
    c.shared = true;
    c.sharedMinBytes = std::max<size_t>(cells->cellBytes() + 1, env::bytes("SNCL_SHM_DIRECT_MIN_BYTES", 0));
    c.scratch.assign(kScratchBytes, 0);
    c.cacheBytes = topo::lastLevelCacheBytes();
    // Parts of whole 64-byte lines: every element in them aligned.
    c.stagePartBytes = env::bytes("SNCL_SHM_STAGE_BYTES", kStageBytes) / 4 / 64 * 64;
    if (comm->rank == 0)
      log::info(log::Subsys::Plan,
                "comm {}: from {} bytes per rank, AllReduce, AllGather, Broadcast, Reduce and ReduceScatter on "
                "buffers every rank shares (snclMemAlloc) read and write them in place (algorithm \"shared\")",
                comm->name, c.sharedMinBytes);
  }
}

CallRoute routeCall(snclComm* comm, const CollOp& op, uint64_t seq) {
  CellsPath& c = comm->cells;
  CellsColl coll;
  // No transport has cells for every rank (or SNCL_ALGO forces the planner), or the
  // collective has no cells form: the schedule.
  if (!c.transport || !cellsColl(op.coll, &coll)) return {};
  LocalCells* cells = c.transport->localCells();
  if (!cells) return {};
  // A call some rank had reached when a fault hit runs the plan it chose then.
  if (pinnedPlan(comm, seq)) return {};
  const size_t bytes = op.count * dtypeSize(op.dtype);
  // Small: one cell round (Reduce-Scatter has no cells form of its own).
  if (coll != CellsColl::ReduceScatter && cellsFit(*cells, bytes)) return {CallPath::Cells, false, cells};
  // Larger: on buffers every rank maps, from the shared path's threshold.
  if (!c.shared || bytes < c.sharedMinBytes) return {};
  // Buffers that are not shared go through staging areas up to the planner's measured
  // crossover (Tuning::stagedMaxBytes); past it they are declined to the schedule.
  const bool stage = c.stagePartBytes > 0 && bytes <= comm->planner->model().tuning().stagedMaxAt(comm->nranks);
  return {CallPath::Shared, stage, cells};
}

Result runRoute(snclComm* comm, const CallRoute& route, const CollOp& op, const ExecArgs& args, bool* interrupted,
                bool* declined) {
  *declined = false;
  CellsPath& c = comm->cells;
  LocalCells* cells = route.cells;
  if (route.path == CallPath::Shared) return sharedRun(comm, *cells, op, args, route.stage, interrupted, declined);
  CellsCall call;
  cellsColl(op.coll, &call.coll);
  call.input = args.input;  // the scaled copy for a pre-multiplied sum
  call.output = args.output;
  call.elemSize = args.elemSize;
  call.count = op.count;
  call.reduce = args.reduce;
  call.root = op.root;
  call.typeOp = uint32_t(op.dtype) | uint32_t(op.op) << 8;
  const CellsWait wait = waitOf(comm);
  const size_t bucket = std::bit_width(call.bytes());
  if (!(c.loggedBuckets & (uint64_t{1} << bucket))) {
    c.loggedBuckets |= uint64_t{1} << bucket;
    log::info(log::Subsys::Plan, "comm {} rank {}: {} of {} bytes per rank: algorithm cells (shared-memory cells)",
              comm->name, comm->rank, cellsCollName(call.coll), call.bytes());
  }
  ++c.calls;
  comm->executor->setProgress(0, 1);
  return runCells(*cells, comm->rank, comm->nranks, call, wait, interrupted);
}

}  // namespace sncl
