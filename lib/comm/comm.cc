#include "lib/comm/comm.h"

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <new>
#include <optional>

#include "lib/base/env.h"
#include "lib/base/hash.h"
#include "lib/base/log.h"
#include "lib/comm/compressed.h"
#include "lib/comm/job_view.h"
#include "lib/comm/p2p_group.h"
#include "lib/comm/threading.h"
#include "lib/exec/reduce.h"
#include "lib/plan/default_topo.h"
#include "lib/transport/bus_control.h"

namespace sncl {
namespace {

// What this rank tells the others at init.
struct InitInfo {
  PeerInfo peer;
  uint64_t nonce;  // rank 0's becomes part of the comm id, so that comms made from one
                   // SNCL_COMM_ID address one after another get distinct shm names
  CpuSummary cpus;  // for the threading model (lib/comm/threading.h)
  SharedRef board;  // rank 0's: where the progress board is (lib/comm/progress_board.h)
  int64_t endpoint; // the topology endpoint it keeps from the comm it was split or shrunk from (-1: none)
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

// Which transport serves peer. SNCL_TRANSPORT forces one for every peer. Otherwise: bus
// between ranks that a topology file places in one supernode (the emulated scale-up bus),
// shm between ranks of one (virtual) host (same PeerInfo.hostId, which SNCL_HOSTID
// splits), ofi between hosts (the network plugin instead when SNCL_NET_PLUGIN names one).
Result chooseTransport(const CommTopology& topology, const PeerInfo& self, const PeerInfo& peer, std::string* name) {
  auto names = transportNames();
  if (auto forced = env::str("SNCL_TRANSPORT")) {
    if (std::find(names.begin(), names.end(), *forced) == names.end())
      return fail(snclInvalidArgument, "SNCL_TRANSPORT={} is not a transport (available: {})", *forced,
                  fmt::join(names, ", "));
    if (*forced == "plugin" && !env::str("SNCL_NET_PLUGIN"))
      return fail(snclInvalidUsage,
                  "SNCL_TRANSPORT=plugin needs SNCL_NET_PLUGIN, the path or name of a network plugin library "
                  "(docs/plugins.md)");
    *name = *forced;
    return snclSuccess;
  }
  const bool busBuilt = std::find(names.begin(), names.end(), "bus") != names.end();
  if (busBuilt && topology.fromFile() && topology.sameSupernode(self.rank, peer.rank)) {
    *name = "bus";
  } else if (peer.hostId == self.hostId) {
    *name = "shm";
  } else {
    *name = env::str("SNCL_NET_PLUGIN") ? "plugin" : "ofi";  // a network plugin replaces ofi
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
    SNCL_CHECK(chooseTransport(*comm->topology, comm->peers[comm->rank], comm->peers[p], &name));
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
  ctx.topology = comm->topology.get();
  ctx.wait = comm->threads.wait;
  ctx.oversubscribed = comm->threads.oversubscribed;
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
  comm->executor = std::make_unique<Executor>(comm->rank, std::move(transportOfPeer), comm->timeoutMs, comm->threads.wait);
  log::info(log::Subsys::Init, "comm {} rank {}/{} ready; transports:{}", comm->name, comm->rank, comm->nranks,
            summary.empty() ? " none" : summary);
  return snclSuccess;
}

// The planner's cost model: the calibrated figures (SNCL_TUNING_FILE) on the comm's
// topology file, or without one on the hosts the transports follow (shm inside, ofi
// between). Every rank reads the same files and sees the same peers, so all choose alike.
Result setupPlanner(snclComm* comm) {
  Tuning tuning = defaultTuning();
  if (auto file = env::str("SNCL_TUNING_FILE")) SNCL_CHECK(loadTuning(*file, &tuning));
  std::shared_ptr<const topo::Graph> graph;
  std::vector<topo::VertexId> rankVertex;
  // The comm's graph when it describes the links in use: a topology file, or the emulated
  // bus everywhere (its default supernode); otherwise hosts from the peers' host ids.
  const bool busEverywhere = env::str("SNCL_TRANSPORT").value_or("") == "bus";
  if (comm->topology->fromFile() || busEverywhere) {
    graph = std::shared_ptr<const topo::Graph>(comm->topology, &comm->topology->graph());
    for (int r = 0; r < comm->nranks; ++r) rankVertex.push_back(comm->topology->rankVertex(r));
  } else {
    // A network transport forced for every pair (SNCL_TRANSPORT=ofi or plugin) reaches even
    // the ranks of one host over the network: each is priced as a host of its own.
    std::vector<PeerInfo> placed = comm->peers;
    const std::string forced = env::str("SNCL_TRANSPORT").value_or("");
    if (forced == "ofi" || forced == "plugin")
      for (size_t r = 0; r < placed.size(); ++r) placed[r].hostId = r;
    std::shared_ptr<topo::Graph> hosts;
    SNCL_CHECK(defaultTopology(placed, tuning, &hosts, &rankVertex));
    graph = std::move(hosts);
  }
  // Every pair on the emulated bus: the estimates predict its modeled clock.
  bool allBus = busEverywhere;
  if (!allBus && comm->topology->fromFile()) {
    const auto names = transportNames();
    allBus = std::find(names.begin(), names.end(), "bus") != names.end();
    for (int r = 1; r < comm->nranks && allBus; ++r) allBus = comm->topology->sameSupernode(0, r);
  }
  auto model = std::make_shared<CostModel>(std::move(graph), std::move(rankVertex), std::move(tuning),
                                           allBus ? CostClock::BusModeled : CostClock::Wall, CostPath::Bundled,
                                           comm->threads.busiestShare);
  PlannerOptions options;
  options.algoSpec = env::str("SNCL_ALGO").value_or("");
  options.chunkBytes = env::bytes("SNCL_CHUNK_SIZE", 1u << 20);
  comm->planner = std::make_unique<Planner>(comm->rank, std::move(model), options);
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
  comm->blocking = !config || config->blocking == SNCL_CONFIG_UNDEF_INT || config->blocking != 0;
  comm->userOpTag = newUserOpTag();
  comm->compress = makeCompressState();
  comm->compressFromBytes = compressFromBytes(*comm->compress);
  const Deadline deadline = Deadline::afterMs(comm->timeoutMs);

  SNCL_CHECK(Bootstrap::connect(id, rank, nranks, deadline, &comm->bootstrap));

  std::vector<InitInfo> infos(nranks);
  infos[rank].peer = localPeerInfo(rank);
  infos[rank].cpus = cpusOfThisThread();
  if (getrandom(&infos[rank].nonce, sizeof(uint64_t), 0) != sizeof(uint64_t))
    return fail(snclSystemError, "getrandom failed: {}", strerror(errno));
  infos[rank].endpoint = comm->inheritedEndpoint;
  if (rank == 0) comm->board.create(nranks, &infos[0].board);
  SNCL_CHECK(comm->bootstrap->allGather(infos.data(), sizeof(InitInfo), deadline));
  comm->peers.resize(nranks);
  std::vector<CpuSummary> cpus(nranks);
  bool allLocal = true;
  for (int r = 0; r < nranks; ++r) {
    comm->peers[r] = infos[r].peer, cpus[r] = infos[r].cpus;
    allLocal &= infos[r].peer.hostId == infos[0].peer.hostId && infos[r].peer.bootId == infos[0].peer.bootId;
  }
  comm->board.attach(rank, nranks, allLocal, infos[0].board);
  SNCL_CHECK(decideThreads(rank, comm->peers, cpus, &comm->threads));
  log::info(log::Subsys::Init, "comm {} rank {}: {}", comm->name, rank, comm->threads.describe());
  comm->commId = fnv1a(&infos[0].nonce, sizeof(uint64_t), fnv1a(id.internal, sizeof(id.internal)));

  // A comm split or shrunk from another keeps each process on its endpoint: its place in
  // the topology does not move with its new rank number.
  // A process new to the job (snclCommGrow) takes a free endpoint.
  std::vector<int64_t> endpoints(nranks);
  for (int r = 0; r < nranks; ++r) endpoints[r] = infos[r].endpoint;
  std::shared_ptr<CommTopology> topology;
  SNCL_CHECK(std::any_of(endpoints.begin(), endpoints.end(), [](int64_t e) { return e >= 0; })
                 ? CommTopology::buildOnEndpoints(endpoints, &topology)
                 : CommTopology::build(nranks, &topology));
  comm->topology = std::move(topology);
  if (rank == 0) log::info(log::Subsys::Topo, "comm {} topology {}", comm->name, comm->topology->describe());

  SNCL_CHECK(setupTransports(comm, deadline));

  SNCL_CHECK(setupPlanner(comm));
  faultInit(comm);
  historyInit(comm, config && config->size >= offsetof(snclConfig_t, memBudget) + sizeof(size_t) ? config->memBudget : 0);
  cellsInit(comm);
  observeInit(comm);
  jobview::add(comm);
  return snclSuccess;
}

namespace {


// Elements of this rank's reduced result, which avg scales (0: the rank gets none).
size_t resultCount(const CollOp& op, int rank) {
  if (op.coll == CollType::Reduce && rank != op.root) return 0;
  return op.count;
}

// The links not up, for messages that must show whether two ranks plan on the same graph.
std::string linkHealthSummary(const topo::Graph& g) {
  std::string out;
  for (topo::LinkId l = 0; l < g.linkCount(); ++l)
    if (g.linkState(l) != topo::LinkState::Up)
      out += fmt::format("{}{}:{}", out.empty() ? "" : " ", g.linkName(l),
                         g.linkState(l) == topo::LinkState::Down ? std::string("down") : fmt::format("x{:.3g}", g.linkFactor(l)));
  return out.empty() ? "all up" : out;
}

// One attempt of a schedule. With retry on, its failures are the agreement's to judge:
// logged at INFO, and a call that fails for good says why at WARN when it returns.
// Calls of a comm whose ranks share memory may take the cells or shared buffers instead:
// routeCall (lib/comm/cells_path.h) decides, per attempt, since a fault's catch-up pins the
// call to its schedule on every rank.
Result runAttempt(snclComm* comm, const CollOp& op, const algo::Schedule& schedule, const ExecArgs& args,
                  bool* interrupted) {
  std::optional<ExpectedErrors> expected;
  if (comm->fault.retry) expected.emplace();
  const CallRoute route = routeCall(comm, op, args.seq);
  if (route.path != CallPath::Schedule) {
    bool declined = false;
    const Result r = runRoute(comm, route, op, args, interrupted, &declined);
    if (!declined) return r;
  }
  const Result r = comm->executor->run(schedule, args);
  *interrupted = comm->executor->interrupted();
  return r;
}

// Runs the schedule until it succeeds or the comm's ranks agree it cannot: a lost link
// with another route is marked down, the transports reset and the call re-run from its
// preserved input (an in-place input comes back from the copy keepStart made before the
// first attempt). Ranks that are
// behind the others are caught up first: this rank replays the calls it finished since
// (lib/comm/catch_up.h).
// first: an attempt already made on the cells (runCollective), whose failure is judged here.
struct Attempt {
  Result result = snclSuccess;
  bool interrupted = false;
};
// Whether an attempt that returned *r is done: it succeeded, no fault is pending, and what is
// kept of it went to the history (lib/comm/history.h). Else *r and *interrupted say why not.
bool attemptDone(snclComm* comm, const CollOp& op, const ExecArgs& args, Result* r, bool* interrupted) {
  if (*r != snclSuccess || faultPending(comm)) return false;
  *r = keepFinished(comm, op, args, interrupted);
  return *r == snclSuccess && !*interrupted;
}
Result runWithRetry(snclComm* comm, const CollOp& op, const Plan& plan, const ExecArgs& args,
                    const Attempt* first) {
  FaultState& f = comm->fault;
  const size_t inBytes = inputCount(op, comm->nranks) * args.elemSize;
  const size_t outBytes = outputCount(op, comm->nranks) * args.elemSize;
  const auto* in = static_cast<const char*>(args.input);
  const auto* out = static_cast<const char*>(args.output);
  const bool restore = f.retry && in && out && inBytes && in < out + outBytes && out < in + inBytes;
  double failedAt = 0;
  std::vector<uint32_t> rerouted;
  for (int attempt = 1;; ++attempt) {
    bool interrupted = false;
    Result r = snclSuccess;
    if (first && attempt == 1) {
      r = first->result;
      interrupted = first->interrupted;
    } else {
      r = runAttempt(comm, op, comm->schedule, args, &interrupted);
      // A fault round that reaches this rank while it hands on what it kept finds it as
      // one still in the call.
      if (attemptDone(comm, op, args, &r, &interrupted)) break;
    }
    if (f.revoked.load()) return fail(snclRemoteError, "comm {} rank {}: {}", comm->name, comm->rank, revokedText(comm));
    if (comm->aborted.load() || faultSelfDead(comm)) return r == snclSuccess ? snclRemoteError : r;
    // A caller's mistake (calls or counts that differ across ranks) is not a fault: no
    // agreement makes the call succeed, and the caller must see what it did.
    if (!interrupted && (r == snclInvalidArgument || r == snclInvalidUsage)) {
      const std::string differ = comm->board.differText(args.seq + 1);
      return fail(r, "{}{}{} (rank {} ran call #{} as {}{}, topology epoch {}, links {})", differ,
                  differ.empty() ? "" : "; ", lastError(), comm->rank,
                  args.seq + 1, comm->planner->describe(plan), pinnedPlan(comm, args.seq) ? ", pinned after a fault" : "",
                  comm->topology->epoch(), linkHealthSummary(comm->topology->graph()));
    }
    std::string cause = r != snclSuccess && !interrupted ? lastError() : std::string();
    // Name the culprit where the ranks share a board: those that never reached the call
    // (a stall), or those that called something else (a peer that failed on the mismatch
    // first and left). It leads this rank's error, whatever the agreement then says.
    // A rank pulled into the round (interrupted) names it too: its peers may have left.
    std::string culprit;
    if (r != snclSuccess || interrupted) {
      culprit = r == snclTimeout && !interrupted ? comm->board.lateText(args.seq + 1) : std::string();
      if (culprit.empty()) culprit = comm->board.differText(args.seq + 1);
      if (!culprit.empty() && !interrupted) {
        recordError(r, fmt::format("{}; {}", culprit, cause));
        cause = lastError();
      }
    }
    const auto named = [&](const std::string& message) {
      return culprit.empty() || message.find(culprit) != std::string::npos ? message : culprit + "; " + message;
    };
    if (failedAt == 0) failedAt = nowSeconds();
    Decision d;
    // An in-place input that was not kept (larger than the budget) cannot be restored.
    const bool restorable = !restore || keptInput(comm, args.seq);
    const Result agreed =
        faultAgree(comm, args.seq, interrupted ? snclSuccess : r, cause, attempt < f.maxAttempts && restorable, &plan, &d);
    if (agreed != snclSuccess) return recordError(agreed, named(lastError()));
    if (d.verdict != Verdict::Retry)
      return recordError(d.code, named(fmt::format("comm {} rank {}: {}", comm->name, comm->rank, d.message)));
    SNCL_CHECK(faultApplyRetry(comm, d));
    rerouted.insert(rerouted.end(), d.links.begin(), d.links.end());
    if (d.catchUpSeq != Decision::kNoCatchUp) {
      // A fault during the replay (another link lost, a peer pulled into a round) is agreed
      // like the first, while attempts remain: the next attempt meets it, and a new round
      // decides again (the calls are still kept: no rank has finished them all).
      const Result replayed = catchUp(comm, d, args.seq);
      if (replayed != snclSuccess) {
        if (replayed == snclInternalError || attempt >= f.maxAttempts || comm->aborted.load() || f.revoked.load() ||
            faultSelfDead(comm))
          return replayed;
        log::info(log::Subsys::Fault, "comm {} rank {}: {}; a new round decides", comm->name, comm->rank, lastError());
        continue;
      }
    }
    if (const char* kept = restore ? keptInput(comm, args.seq) : nullptr) memcpy(const_cast<char*>(in), kept, inBytes);
  }
  if (failedAt == 0) return snclSuccess;
  // The call came through a lost link: say what, after which call, at what cost.
  ++f.stats.reroutes;
  f.stats.lastRecoveryMs = (nowSeconds() - failedAt) * 1000;
  const topo::Graph& g = comm->topology->graph();
  std::string links;
  for (uint32_t l : rerouted) links += (links.empty() ? "" : ", ") + g.linkName(l);
  const size_t bytes = op.count * args.elemSize;
  const double estimate = comm->planner->estimateUs(op.coll, plan, bytes);
  const std::string used = comm->planner->describe(plan);  // plan is the planner's: read before choosing again
  const std::string next = comm->planner->describe(comm->planner->choose(op.coll, bytes));
  log::info(log::Subsys::Fault,
            "comm {} rank {}: {} during {} #{} ({} bytes, {}); rerouted on topology epoch {} and re-ran "
            "from preserved inputs: {:.1f} ms from the failure to the end of the re-run; the re-run is modeled at "
            "{:.1f} us on the new routes; later calls of this size: {}",
            comm->name, comm->rank, links.empty() ? "a transport's rails changed" : "link(s) " + links + " lost",
            collName(op.coll),
            args.seq + 1, bytes, used, comm->topology->epoch(),
            f.stats.lastRecoveryMs, estimate, next);
  return snclSuccess;
}

// What every rank of a correct program passes alike for op: the collective, its bytes (the
// v-forms' counts are per rank: left out), the type and op of a reduction, the root. A
// reduction's type counts apart from its size (4 floats are not 2 doubles); elsewhere only
// bytes must agree. Two words mixed a word at a time: it runs on every call, and a byte-wise
// hash of the fields cost 9% of an 8-byte All-Reduce (docs/observability.md).
uint32_t callSignature(const CollOp& op, size_t elemSize) {
  const bool reduction = reduces(op.coll);
  const uint64_t kind = uint64_t(op.coll) | uint64_t(reduction ? op.dtype : 0) << 8 |
                        uint64_t(reduction ? uint32_t(op.op) & 0xffff : 0) << 16 |
                        uint64_t(uint32_t(hasRoot(op.coll) ? op.root : 0)) << 32;
  const uint64_t h = fnvMix(fnvMix(kFnvBasis, kind), hasLayout(op.coll) ? 0 : op.count * elemSize);
  return uint32_t((h ^ (h >> 24) ^ (h >> 48)) & 0xffffffu);
}

// Whether every rank of op reduces what it receives while its own data still goes out
// (CallHints::exchangesReductions): a reduction other than Reduce, whose data flows to the root.
bool exchangesReductions(CollType c) {
  return reduces(c) && c != CollType::Reduce;
}

// An average is a sum until here: this rank's results divided by nranks.
void scaleAverage(snclComm* comm, const CollOp& op) {
  const size_t results = op.op == snclAvg ? resultCount(op, comm->rank) : 0;
  if (results) scaleKernel(op.dtype)(op.output, op.output, results, 1.0 / comm->nranks, comm->nranks);
}

// Runs one collective. A failure of the executor leaves messages half exchanged, so it
// is the comm's asynchronous error too.
Result runCollective(snclComm* comm, const CollOp& op, CallObserver* observer) {
  const size_t elemSize = dtypeSize(op.dtype);
  ExecArgs args;
  args.input = op.input;
  args.output = op.output;
  args.elemSize = elemSize;
  args.seq = comm->seq++;
  comm->board.enter(args.seq + 1, op, elemSize);
  if (reduces(op.coll)) {
    args.reduce = reduceKernel(op.dtype, op.op == snclAvg ? snclSum : op.op);
    if (!args.reduce)
      return fail(snclInvalidArgument, "reduction {} is not supported for {}", redOpName(op.op), dtypeName(op.dtype));
  }

  for (auto& t : comm->transports) t->beforePlan(args.seq);
  // A small call on the cells (routeCall, lib/comm/cells_path.h) needs no plan or schedule
  // while it succeeds: that work (a fifth of an 8-byte All-Reduce) is done only for a
  // failure, which the retry loop below judges as any other. Not with retry on, which keeps
  // each call with its plan for a catch-up, nor for a pre-multiplied sum, whose scaled input
  // lives in the schedule's scratch.
  std::optional<Attempt> first;
  if (!comm->fault.retry && !op.preMul) {
    const CallRoute route = routeCall(comm, op, args.seq);
    if (route.path == CallPath::Cells) {
      observer->planned("cells");
      bool interrupted = false, declined = false;  // the cells never decline
      Result r = runRoute(comm, route, op, args, &interrupted, &declined);
      if (attemptDone(comm, op, args, &r, &interrupted)) {
        scaleAverage(comm, op);
        return snclSuccess;
      }
      first = Attempt{r, interrupted};
    }
  }
  args.signature = callSignature(op, elemSize);  // the schedule's message tags carry it
  // After a fault, calls that some rank had reached run on the plan it chose then.
  Plan pinned;
  const Plan* pin = pinnedPlan(comm, args.seq);
  if (pin) {
    pinned = *pin;
    pinned.coll = op.coll;
  }
  const Plan& plan = pin ? pinned : comm->planner->choose(op.coll, op.count * elemSize);
  observer->planned(plan);
  const CollShape shape{op.count, elemSize, hasRoot(op.coll) ? op.root : 0,
                        shapedByInPlace(op.coll) && op.input == op.output, op.layout.empty() ? nullptr : op.layout.data()};
  auto& key = comm->scheduleKey;
  // The v-forms' schedules follow their arrays, which the key does not hold: built each call.
  if (hasLayout(op.coll) || key.coll != op.coll || key.algorithm != plan.algorithm || key.variant != plan.variant() || key.count != shape.count ||
      key.elemSize != elemSize || key.chunkBytes != plan.chunkBytes || key.root != shape.root ||
      key.inPlace != shape.inPlace) {
    comm->planner->build(plan, shape, &comm->schedule);
    key = {op.coll, plan.algorithm, plan.variant(), shape.count, elemSize, plan.chunkBytes, shape.root, shape.inPlace};
  }
  // Scratch: the schedule's, then (pre-multiplied sum) this rank's scaled input, which
  // the schedule reads instead of the caller's: one extra pass over the input, since a
  // reduction kernel combines two operands without scaling either.
  const size_t scheduleBytes = (comm->schedule.scratchCount * elemSize + 63) / 64 * 64;
  const size_t scaledCount = op.preMul ? inputCount(op, comm->nranks) : 0;
  const size_t scratchBytes = scheduleBytes + scaledCount * elemSize;
  if (comm->scratch.size() < scratchBytes) comm->scratch.resize(scratchBytes);  // zero-filled: pages touched now
  args.scratch = comm->scratch.data();
  if (scaledCount) {
    void* scaled = comm->scratch.data() + scheduleBytes;
    const double factor = op.scalarPtr ? scalarValue(op.dtype, op.scalarPtr) : op.scalar;
    scaleKernel(op.dtype)(scaled, op.input, scaledCount, factor, 0);
    args.input = scaled;
  }
  const uint64_t reroutes = comm->fault.stats.reroutes;
  for (auto& t : comm->transports) t->callBegin(CallHints{.exchangesReductions = exchangesReductions(op.coll)});
  keepStart(comm, op, plan, shape, args);
  const Result r = runWithRetry(comm, op, plan, args, first ? &*first : nullptr);
  for (auto& t : comm->transports) t->callEnd();
  if (r != snclSuccess) {
    commSetAsyncError(comm, r);
    return r;
  }
  if (comm->fault.stats.reroutes != reroutes)  // the modeled time of the call with its re-run
    for (auto& t : comm->transports)
      if (auto* bus = dynamic_cast<BusControl*>(t.get())) bus->modeledTimeUs(&comm->fault.stats.lastRetryModeledUs, nullptr);
  scaleAverage(comm, op);
  return snclSuccess;
}

// Whether comm may run calls (under its runMutex).
Result runnable(snclComm* comm) {
  if (comm->aborted.load()) return fail(snclInvalidUsage, "comm {} rank {} was aborted", comm->name, comm->rank);
  if (comm->fault.revoked.load())
    return fail(snclRemoteError, "comm {} rank {}: {}", comm->name, comm->rank, revokedText(comm));
  if (comm->fault.broken)
    return fail(snclRemoteError, "comm {} rank {}: {} (shrink the comm to go on)", comm->name, comm->rank,
                comm->fault.brokenMessage);
  return snclSuccess;
}

// Runs calls on comm under its runMutex, once comm may. Schedules and scratch grow with the
// largest call so far; running out of memory there is a failed call, not an exception
// through the C API.
template <class F>
Result underRunMutex(snclComm* comm, const F& calls) {
  std::lock_guard<std::mutex> lock(comm->runMutex);
  log::setThreadRank(comm->rank);
  SNCL_CHECK(runnable(comm));
  try {
    return calls();
  } catch (const std::bad_alloc&) {
    comm->scheduleKey.count = SIZE_MAX;  // the schedule may be half built
    return fail(snclSystemError, "comm {} rank {}: out of memory for a schedule or scratch", comm->name, comm->rank);
  }
}

Result runObserved(snclComm* comm, const CollOp& op, bool onStream) {
  CallObserver observer(comm, op, onStream);
  const Result r = runCollective(comm, op, &observer);
  observer.end(r);
  return r;
}

}  // namespace

Result commRun(snclComm* comm, const CollOp& op) {
  if (isPointToPoint(op.coll)) {
    GroupTask task;
    task.comm = comm;
    task.op = op;
    return commRunBatch(comm, &task, 1);
  }
  // One collective: as commRunBatch, without copying op into a task.
  return underRunMutex(comm, [&] { return runObserved(comm, op, false); });
}

Result commRunBatch(snclComm* comm, const GroupTask* tasks, size_t n) {
  return underRunMutex(comm, [&] {
    bool pointToPoint = false;
    Result r = snclSuccess;
    for (size_t i = 0; i < n && r == snclSuccess; ++i) {
      if (isPointToPoint(tasks[i].op.coll)) pointToPoint = true;
      else r = runObserved(comm, tasks[i].op, tasks[i].stream != nullptr);
    }
    if (r == snclSuccess && pointToPoint) {
      CallObserver observer(comm, tasks, n);
      r = runPointToPoint(comm, tasks, n);
      observer.end(r);
    }
    return r;
  });
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
