#include "lib/comm.h"

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "lib/env.h"
#include "lib/log.h"
#include "lib/reduce.h"

namespace sncl {
namespace {

uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// What this rank tells the others at init.
struct InitInfo {
  PeerInfo peer;
  uint64_t nonce;  // rank 0's becomes part of the comm id, so that comms made from one
                   // SNCL_COMM_ID address one after another get distinct shm names
};

PeerInfo localPeerInfo(int rank) {
  PeerInfo p{};
  p.rank = rank;
  p.pid = getpid();
  gethostname(p.hostname, sizeof(p.hostname) - 1);
  std::string bootId;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> bootId;
  p.bootId = fnv1a(bootId.data(), bootId.size());
  // SNCL_HOSTID splits one machine into virtual hosts (for tests of multi-host paths).
  std::string host = env::str("SNCL_HOSTID").value_or(std::string(p.hostname) + "/" + bootId);
  p.hostId = fnv1a(host.data(), host.size());
  return p;
}

// Which transport serves peer. SNCL_TRANSPORT forces one for every peer. Otherwise: shm
// between ranks of one (virtual) host (same PeerInfo.hostId, which SNCL_HOSTID splits),
// ofi between hosts.
Result chooseTransport(const PeerInfo& self, const PeerInfo& peer, std::string* name) {
  auto names = transportNames();
  if (auto forced = env::str("SNCL_TRANSPORT")) {
    if (std::find(names.begin(), names.end(), *forced) == names.end())
      return fail(snclInvalidArgument, "SNCL_TRANSPORT={} is not a transport (available: {})", *forced,
                  fmt::join(names, ", "));
    *name = *forced;
    return snclSuccess;
  }
  if (peer.hostId == self.hostId) {
    *name = "shm";
  } else {
    // Here, before ofi: "bus" for pairs inside one emulated supernode (from the topology).
    *name = "ofi";
  }
  if (std::find(names.begin(), names.end(), *name) == names.end())
    return fail(snclInvalidUsage, "rank {} on host {} needs the {} transport to reach rank {} on host {}, but it is not built in",
                self.rank, self.hostname, *name, peer.rank, peer.hostname);
  return snclSuccess;
}

Result setupTransports(snclComm* comm, Deadline deadline) {
  const auto names = transportNames();
  std::vector<std::vector<int>> peersOf(names.size());
  uint64_t mask = 0;
  for (int p = 0; p < comm->nranks; ++p) {
    if (p == comm->rank) continue;
    std::string name;
    SNCL_CHECK(chooseTransport(comm->peers[comm->rank], comm->peers[p], &name));
    size_t t = std::find(names.begin(), names.end(), name) - names.begin();
    peersOf[t].push_back(p);
    mask |= 1ull << t;
  }
  // Every rank sets up the union of what any rank needs, in registry order.
  std::vector<uint64_t> masks(comm->nranks);
  masks[comm->rank] = mask;
  SNCL_CHECK(comm->bootstrap->allGather(masks.data(), sizeof(uint64_t), deadline));
  uint64_t all = 0;
  for (uint64_t m : masks) all |= m;

  TransportContext ctx;
  ctx.rank = comm->rank;
  ctx.nranks = comm->nranks;
  ctx.commId = comm->commId;
  ctx.commName = comm->name;
  ctx.peers = &comm->peers;
  ctx.bootstrap = comm->bootstrap.get();
  ctx.timeoutMs = comm->timeoutMs;
  std::vector<Transport*> transportOfPeer(comm->nranks, nullptr);
  std::string summary;
  for (size_t t = 0; t < names.size(); ++t) {
    if (!(all & (1ull << t))) continue;
    auto transport = createTransport(names[t]);
    if (!transport) return fail(snclInternalError, "transport {} is registered but cannot be created", names[t]);
    SNCL_CHECK(transport->setup(ctx, peersOf[t]));
    for (int p : peersOf[t]) transportOfPeer[p] = transport.get();
    if (!peersOf[t].empty()) summary += fmt::format(" {}({} peers)", names[t], peersOf[t].size());
    comm->transports.push_back(std::move(transport));
  }
  comm->executor = std::make_unique<Executor>(comm->rank, std::move(transportOfPeer), comm->timeoutMs);
  log::info(log::Subsys::Init, "comm {} rank {}/{} ready; transports:{}", comm->name, comm->rank, comm->nranks,
            summary.empty() ? " none" : summary);
  return snclSuccess;
}

}  // namespace

Result commInit(snclComm* comm, const snclUniqueId& id, int rank, int nranks, const snclConfig_t* config) {
  log::setThreadRank(rank);
  comm->rank = rank;
  comm->nranks = nranks;
  comm->timeoutMs = env::timeoutMs();
  if (config && config->timeoutMs != SNCL_CONFIG_UNDEF_INT && config->timeoutMs > 0)
    comm->timeoutMs = config->timeoutMs;
  comm->name = config && config->commName ? config->commName : "sncl";
  const Deadline deadline = Deadline::afterMs(comm->timeoutMs);

  SNCL_CHECK(Bootstrap::connect(id, rank, nranks, deadline, &comm->bootstrap));

  std::vector<InitInfo> infos(nranks);
  infos[rank].peer = localPeerInfo(rank);
  if (getrandom(&infos[rank].nonce, sizeof(uint64_t), 0) != sizeof(uint64_t))
    return fail(snclSystemError, "getrandom failed: {}", strerror(errno));
  SNCL_CHECK(comm->bootstrap->allGather(infos.data(), sizeof(InitInfo), deadline));
  comm->peers.resize(nranks);
  for (int r = 0; r < nranks; ++r) comm->peers[r] = infos[r].peer;
  comm->commId = fnv1a(&infos[0].nonce, sizeof(uint64_t), fnv1a(id.internal, sizeof(id.internal)));

  SNCL_CHECK(setupTransports(comm, deadline));

  LinkCost link;  // defaults until the topology and calibration provide real figures
  comm->planner = std::make_unique<Planner>(rank, nranks, link, env::str("SNCL_ALGO").value_or(""),
                                            env::bytes("SNCL_CHUNK_SIZE", 1u << 20));
  return snclSuccess;
}

Result commRun(snclComm* comm, const CollOp& op) {
  std::lock_guard<std::mutex> lock(comm->runMutex);
  if (comm->aborted.load()) return fail(snclInvalidUsage, "comm {} rank {} was aborted", comm->name, comm->rank);
  const size_t elemSize = dtypeSize(op.dtype);
  const snclRedOp_t baseOp = op.op == snclAvg ? snclSum : op.op;
  ExecArgs args;
  args.input = op.input;
  args.output = op.output;
  args.elemSize = elemSize;
  args.reduce = reduceKernel(op.dtype, baseOp);
  args.seq = comm->seq++;
  if (!args.reduce)
    return fail(snclInvalidArgument, "reduction {} is not supported for {}", redOpName(op.op), dtypeName(op.dtype));

  const Plan& plan = comm->planner->choose(op.coll, op.count * elemSize);
  auto& key = comm->scheduleKey;
  if (key.algorithm != plan.algorithm || key.count != op.count || key.elemSize != elemSize ||
      key.chunkBytes != plan.chunkBytes) {
    comm->planner->build(plan, op.count, elemSize, &comm->schedule);
    key = {plan.algorithm, op.count, elemSize, plan.chunkBytes};
  }
  const size_t scratchBytes = comm->schedule.scratchCount * elemSize;
  if (comm->scratch.size() < scratchBytes) comm->scratch.resize(scratchBytes);  // zero-filled: pages touched now
  args.scratch = comm->scratch.data();
  Result r = comm->executor->run(comm->schedule, args);
  if (r != snclSuccess) {
    commSetAsyncError(comm, r);
    return r;
  }
  if (op.op == snclAvg && op.count)
    scaleKernel(op.dtype)(op.output, op.output, op.count, 1.0 / comm->nranks, comm->nranks);
  return snclSuccess;
}

void commSetAsyncError(snclComm* comm, Result r) {
  snclResult_t expected = snclSuccess;
  comm->asyncError.compare_exchange_strong(expected, r);
}

void commAbortTransports(snclComm* comm) {
  if (comm->bootstrap) comm->bootstrap->abort();
  for (auto& t : comm->transports) t->abort();
}

bool commWaitIdle(snclComm* comm, int64_t timeoutMs) {
  Deadline deadline = Deadline::afterMs(timeoutMs);
  while (comm->inflight.load() > 0) {
    if (deadline.expired()) return false;
    usleep(200);
  }
  return true;
}

}  // namespace sncl
