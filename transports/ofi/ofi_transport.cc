// OfiTransport: options, setup, wait, abort and teardown. Posting and progress: ofi_progress.cc.
#include "transports/ofi/ofi_transport.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_tagged.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "lib/base/env.h"
#include "lib/base/log.h"
#include "lib/net/bootstrap.h"
#include "lib/net/socket.h"
#include "transports/ofi/ofi_rails.h"

namespace sncl {

OfiOptions OfiOptions::fromEnv() {
  OfiOptions o;
  o.provider = env::str("SNCL_OFI_PROVIDER").value_or("");
  o.tagged = env::integer("SNCL_OFI_TAGGED", 1) != 0;
  o.chunkBytes = env::bytes("SNCL_OFI_CHUNK_SIZE", o.chunkBytes);
  o.directRecv = env::integer("SNCL_OFI_DIRECT_RECV", 1) != 0;
  if (auto slots = env::str("SNCL_OFI_SLOTS")) {
    char* end = nullptr;
    errno = 0;
    const long long n = strtoll(slots->c_str(), &end, 10);
    if (*end || errno || n < 1 || n > static_cast<long long>(kMaxSlots))
      o.error = fmt::format("ofi: SNCL_OFI_SLOTS={} is not a number of slots per peer in 1..{}", *slots, kMaxSlots);
    else
      o.slots = static_cast<size_t>(n);
  }
  const std::string mr = env::str("SNCL_OFI_MR").value_or("auto");
  if (mr == "cache") o.mr = OfiMrPolicy::Cache;
  else if (mr == "bounce") o.mr = OfiMrPolicy::Bounce;
  else if (mr != "auto") log::warn("SNCL_OFI_MR={} is not auto, cache or bounce; using auto", mr);
  const std::string ifaces = env::str("SNCL_OFI_IFACES").value_or("");
  for (size_t start = 0; start < ifaces.size();) {
    size_t comma = ifaces.find(',', start);
    if (comma == std::string::npos) comma = ifaces.size();
    if (comma > start) o.ifaces.push_back(ifaces.substr(start, comma - start));
    start = comma + 1;
  }
  o.railDetectMs = env::integer("SNCL_OFI_RAIL_DETECT_MS", o.railDetectMs);
  return o;
}

std::unique_ptr<Transport> createOfiTransport() { return createOfiTransport(OfiOptions::fromEnv()); }

std::unique_ptr<Transport> createOfiTransport(const OfiOptions& options) {
  if (!options.ifaces.empty()) return ofi::createOfiRails(options);
  return std::make_unique<ofi::OfiTransport>(options);
}

namespace ofi {
namespace {

constexpr size_t kMaxRequests = 1024;   // outstanding isend/irecv per transport
constexpr size_t kCacheEntries = 64;    // distinct user buffers registered at once
constexpr size_t kMinChunk = 4096;
constexpr int kMaxRankBits = 23;        // tag: control bit, 23 bits of rank, 40 of sequence

// The interface the bootstrap uses (SNCL_SOCKET_IFNAME, default lo), as a numeric host
// for FI_SOURCE: libfabric then binds there and nowhere else.
Result sourceNode(std::string* node) {
  SocketAddress addr{};
  SNCL_CHECK(findInterfaceAddress(&addr));
  char host[INET6_ADDRSTRLEN] = "";
  const void* raw = addr.sa.sa_family == AF_INET6 ? static_cast<const void*>(&addr.sin6.sin6_addr)
                                                   : static_cast<const void*>(&addr.sin.sin_addr);
  if (!inet_ntop(addr.sa.sa_family, raw, host, sizeof(host)))
    return fail(snclSystemError, "ofi: inet_ntop: {}", strerror(errno));
  *node = host;
  return snclSuccess;
}

// The IPv4 address of a rail's interface, which must be up.
Result interfaceNode(const std::string& iface, std::string* node) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return fail(snclSystemError, "ofi: getifaddrs: {}", strerror(errno));
  bool up = false, found = false;
  for (ifaddrs* ifa = list; ifa && !found; ifa = ifa->ifa_next) {
    if (iface != ifa->ifa_name) continue;
    up |= (ifa->ifa_flags & IFF_UP) != 0;
    if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != AF_INET || !(ifa->ifa_flags & IFF_UP)) continue;
    char host[INET_ADDRSTRLEN] = "";
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(ifa->ifa_addr)->sin_addr, host, sizeof(host));
    *node = host;
    found = true;
  }
  freeifaddrs(list);
  if (!found)
    return fail(snclInvalidArgument, "ofi: interface {} of SNCL_OFI_IFACES {}", iface,
                up ? "has no IPv4 address" : "does not exist or is down");
  return snclSuccess;
}

const char* mrPolicyName(bool cache, bool bounce) { return bounce ? "bounce" : cache ? "cache" : "direct"; }

}  // namespace

OfiTransport::OfiTransport(const OfiOptions& options) : options_(options) {
  abortFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

OfiTransport::~OfiTransport() {
  // Posted operations point into the slots and the cached registrations: close the
  // endpoint (which cancels them) before deregistering and freeing.
  fabric_.closeEndpoint();
  registrar_.clear();
  if (abortFd_ >= 0) close(abortFd_);
  if (ifFd_ >= 0) close(ifFd_);
  if (probeFd_ >= 0) close(probeFd_);
}

Result OfiTransport::openEndpoint(size_t npeers, AddressRecord* mine) {
  std::string node;
  SNCL_CHECK(options_.iface.empty() ? sourceNode(&node) : interfaceNode(options_.iface, &node));
  // Every slot, every send credit and every hello may complete before the next read.
  const size_t cqSize = 2 * npeers * options_.slots + 2 * npeers + 64;
  SNCL_CHECK(fabric_.open(options_, node, npeers, cqSize));
  SNCL_CHECK(fabric_.localAddress(mine));
  if (railChecks_) SNCL_CHECK(openRailChecks(node, mine));
  const uint64_t mrMode = fabric_.mrMode();
  char mrText[256] = "";
  fi_tostr_r(mrText, sizeof(mrText), &mrMode, FI_TYPE_MR_MODE);  // fi_tostr's buffer is shared by threads
  log::info(log::Subsys::Transport, "ofi: rank {}: provider {} ({}) on {}, address {}, mr_mode [{}], wait {}", rank_,
            fabric_.provider(), fabric_.tagged() ? "FI_TAGGED" : "FI_MSG", node,
            fabric_.addressString(mine->addr, mine->addrLen), mrText, fabric_.waitFd() >= 0 ? "fd" : "sleep");
  return snclSuccess;
}

Result OfiTransport::setup(const TransportContext& ctx, const std::vector<int>& peers) {
  if (setupDone_ || rank_ >= 0) return fail(snclInvalidUsage, "ofi: setup called twice");
  if (!ctx.bootstrap || ctx.rank < 0 || ctx.rank >= ctx.nranks)
    return fail(snclInternalError, "ofi: setup needs a bootstrap and a rank in [0, {})", ctx.nranks);
  rank_ = ctx.rank;
  wait_ = ctx.wait;
  nranks_ = ctx.nranks;
  commId_ = ctx.commId;
  railChecks_ = !options_.iface.empty();  // a rail: its errors lose it; railDetectMs > 0 also its stalls
  const Deadline deadline = Deadline::afterMs(ctx.timeoutMs);
  peers_.assign(nranks_, Peer{});

  // Every rank publishes a record, also one without ofi peers or whose endpoint failed,
  // so that the all-gather completes and every rank learns why setup cannot go on.
  std::vector<AddressRecord> all(nranks_);
  AddressRecord& mine = all[rank_];
  mine = AddressRecord{};
  mine.participates = !peers.empty();
  if (mine.participates) {
    Result r = snclSuccess;
    if (nranks_ > (1 << kMaxRankBits))
      r = fail(snclInvalidArgument, "ofi: {} ranks exceed the {} the tag layout holds", nranks_, 1 << kMaxRankBits);
    else if (!options_.error.empty())
      r = fail(snclInvalidArgument, "{}", options_.error);
    else if (options_.slots < 1 || options_.slots > OfiOptions::kMaxSlots)
      r = fail(snclInvalidArgument, "ofi: {} slots per peer (SNCL_OFI_SLOTS) are outside 1..{}", options_.slots,
               OfiOptions::kMaxSlots);
    else if (options_.chunkBytes < kMinChunk)
      r = fail(snclInvalidArgument, "ofi: SNCL_OFI_CHUNK_SIZE={} is below {}", options_.chunkBytes, kMinChunk);
    else
      r = openEndpoint(peers.size(), &mine);
    mine.status = r;
    mine.chunkBytes = static_cast<uint32_t>(std::min<size_t>(
        std::min<size_t>(options_.chunkBytes, fabric_.maxMsgSize() ? fabric_.maxMsgSize() : SIZE_MAX), 1u << 30));
    if (r != snclSuccess) snprintf(mine.error, sizeof(mine.error), "%s", lastError());
  }
  SNCL_CHECK(ctx.bootstrap->allGather(all.data(), sizeof(AddressRecord), deadline));
  if (mine.status != snclSuccess) return fail(static_cast<Result>(mine.status), "{}", mine.error);
  SNCL_CHECK(checkRecords(all, peers));
  if (peers.empty()) {
    setupDone_ = true;
    return snclSuccess;
  }
  SNCL_CHECK(allocatePools(peers));
  SNCL_CHECK(connectPeers(all, peers, deadline));
  setupDone_ = true;
  log::info(log::Subsys::Transport,
            "ofi: rank {}: {} peers over {}, chunks of {} bytes, {} slots per peer, sends {}, receives {}", rank_,
            peers.size(), fabric_.provider(), chunkBytes_, nSlots_, mrPolicyName(useCache_, bounce_),
            directRecv_ ? fmt::format("direct above {} KiB", kEagerBytes >> 10) : "through the slots");
  return snclSuccess;
}

// Every participating rank must have opened its endpoint and speak the same protocol;
// chunks are the smallest any rank asked for, so both ends of a pair cut messages alike.
Result OfiTransport::checkRecords(const std::vector<AddressRecord>& all, const std::vector<int>& peers) {
  int first = -1;
  size_t chunk = SIZE_MAX;
  for (int k = 0; k < nranks_; ++k) {
    const AddressRecord& r = all[k];
    if (!r.participates) continue;
    if (r.status != snclSuccess)
      return fail(snclRemoteError, "ofi: rank {} could not open its libfabric endpoint: {}", k, r.error);
    if (first < 0) first = k;
    if (strncmp(r.provider, all[first].provider, sizeof(r.provider)) || r.tagged != all[first].tagged)
      return fail(snclInvalidArgument,
                  "ofi: rank {} uses provider {} ({}) but rank {} uses {} ({}); set SNCL_OFI_PROVIDER alike on all ranks",
                  k, r.provider, r.tagged ? "tagged" : "msg", first, all[first].provider,
                  all[first].tagged ? "tagged" : "msg");
    chunk = std::min<size_t>(chunk, r.chunkBytes);
  }
  for (int p : peers) {
    if (p < 0 || p >= nranks_ || p == rank_ || peers_[p].connected)
      return fail(snclInternalError, "ofi: rank {}: bad or repeated peer {} (of {} ranks)", rank_, p, nranks_);
    if (!all[p].participates)
      return fail(snclInternalError, "ofi: rank {} expects rank {} over ofi, but rank {} has no ofi peers", rank_, p, p);
    peers_[p].connected = true;
  }
  chunkBytes_ = chunk & ~size_t(63);  // fragments are 64-byte multiples (RecvSink)
  return snclSuccess;
}

Result OfiTransport::allocatePools(const std::vector<int>& peers) {
  const size_t npeers = peers.size();
  nSlots_ = options_.slots;
  bounce_ = options_.mr == OfiMrPolicy::Bounce;
  useCache_ = options_.mr == OfiMrPolicy::Cache ||
              (options_.mr == OfiMrPolicy::Auto && (fabric_.mrMode() & FI_MR_LOCAL));
  const bool registerSlots = (fabric_.mrMode() & FI_MR_LOCAL) || useCache_ || bounce_;
  checkData_ = fabric_.cqDataBytes() >= sizeof(uint64_t);
  // Untagged receives match in posting order, which a cancelled and reposted one would
  // break. A rail declared lost may still be delivering: its late bytes stay in its slots.
  directRecv_ = options_.directRecv && fabric_.tagged() && !registerSlots && !railChecks_;
  registrar_.init(fabric_.domain(), fabric_.ep(), fabric_.mrMode(), kCacheEntries);

  // Slots are allocated, touched and registered now: the data path never faults a page in.
  const size_t slotBytes = (chunkBytes_ + 4095) & ~size_t(4095);
  const size_t nOps = npeers * nSlots_;
  auto slots = [&](std::unique_ptr<char, FreeDeleter>* mem, std::vector<Op>* ops) -> Result {
    mem->reset(static_cast<char*>(aligned_alloc(4096, nOps * slotBytes)));
    if (!*mem)
      return fail(snclSystemError, "ofi: cannot allocate {} peers x {} slots of {} bytes (SNCL_OFI_SLOTS, "
                  "SNCL_OFI_CHUNK_SIZE)", npeers, nSlots_, slotBytes);
    memset(mem->get(), 0, nOps * slotBytes);
    poolBytes_ += nOps * slotBytes;
    void* desc = nullptr;
    if (registerSlots) SNCL_CHECK(registrar_.registerOwned(mem->get(), nOps * slotBytes, &desc));
    for (size_t i = 0; i < nOps; ++i) {
      (*ops)[i].buf = mem->get() + i * slotBytes;
      (*ops)[i].desc = desc;
    }
    return snclSuccess;
  };
  rxOps_.assign(nOps, Op{});
  txOps_.assign(nOps, Op{});
  for (size_t k = 0; k < npeers; ++k) {
    peers_[peers[k]].firstSlot = static_cast<uint32_t>(k * nSlots_);
    for (size_t i = 0; i < nSlots_; ++i) {
      rxOps_[k * nSlots_ + i].kind = OpKind::Recv;
      rxOps_[k * nSlots_ + i].peer = peers[k];
    }
  }
  for (Op& op : txOps_) op.kind = OpKind::Send;
  SNCL_CHECK(slots(&rxMemory_, &rxOps_));
  if (bounce_) SNCL_CHECK(slots(&txMemory_, &txOps_));
  helloOps_.assign(2 * npeers, Op{});
  for (size_t k = 0; k < npeers; ++k) {
    helloOps_[2 * k].kind = OpKind::HelloRecv;
    helloOps_[2 * k].peer = peers[k];
    helloOps_[2 * k + 1].kind = OpKind::HelloSend;
    helloOps_[2 * k + 1].peer = peers[k];
  }
  requests_.assign(kMaxRequests, Request{});
  freeRequests_.clear();
  for (size_t i = kMaxRequests; i-- > 0;) freeRequests_.push_back(static_cast<uint32_t>(i));
  freeTx_.clear();
  for (size_t i = txOps_.size(); i-- > 0;) freeTx_.push_back(static_cast<uint32_t>(i));
  sendReady_.clear();
  sendReady_.reserve(npeers);
  slotsReady_.clear();
  slotsReady_.reserve(npeers);
  return snclSuccess;
}

// Posts what is due and not posted yet (neither busy nor done): every hello receive, the
// hello to a higher rank, and the answer to a lower rank once its hello arrived.
Result OfiTransport::postHellos() {
  fid_ep* ep = fabric_.ep();
  const bool tagged = fabric_.tagged();
  for (size_t i = 0; i < helloOps_.size(); ++i) {
    Op& op = helloOps_[i];
    if (op.busy || op.done) continue;
    const int p = op.peer;
    const fi_addr_t addr = peers_[p].addr;
    ssize_t rc;
    if (op.kind == OpKind::HelloRecv) {
      rc = tagged ? fi_trecv(ep, nullptr, 0, nullptr, addr, chunkTag(p, 0) | kControlBit, 0, &op.ctx)
                  : fi_recv(ep, nullptr, 0, nullptr, addr, &op.ctx);
    } else {
      if (p < rank_ && !helloOps_[i - 1].done) continue;  // answered once the lower rank's hello came
      // Hellos carry the comm id as CQ data: an address reused by another comm is noticed.
      const uint64_t tag = chunkTag(rank_, 0) | kControlBit;
      rc = checkData_ ? (tagged ? fi_tsenddata(ep, nullptr, 0, nullptr, commId_, addr, tag, &op.ctx)
                                : fi_senddata(ep, nullptr, 0, nullptr, commId_, addr, &op.ctx))
                      : (tagged ? fi_tsend(ep, nullptr, 0, nullptr, addr, tag, &op.ctx)
                                : fi_send(ep, nullptr, 0, nullptr, addr, &op.ctx));
    }
    if (rc == -FI_EAGAIN) return snclSuccess;  // retried after the next progress
    if (rc)
      return fail(snclRemoteError, "ofi: rank {}: posting the hello {} rank {} ({}): {}", rank_,
                  op.kind == OpKind::HelloRecv ? "from" : "to", p, peers_[p].address, fi_strerror(static_cast<int>(-rc)));
    op.busy = true;
  }
  return snclSuccess;
}

Result OfiTransport::connectPeers(const std::vector<AddressRecord>& all, const std::vector<int>& peers,
                                  Deadline deadline) {
  for (int p : peers) {
    peers_[p].address = fabric_.addressString(all[p].addr, all[p].addrLen);
    peers_[p].probe.sin_family = AF_INET;
    peers_[p].probe.sin_addr.s_addr = all[p].probeAddr;
    peers_[p].probe.sin_port = all[p].probePort;
    SNCL_CHECK(fabric_.insert(all[p], p, &peers_[p].addr));
  }
  for (;;) {
    SNCL_CHECK(postHellos());
    progress();
    size_t waiting = 0;
    for (const Op& op : helloOps_) {
      if (peers_[op.peer].error != snclSuccess) return fail(peers_[op.peer].error, "{}", peers_[op.peer].message);
      waiting += !op.done;
    }
    if (!waiting) break;
    if (aborted_.load()) return fail(snclInvalidUsage, "ofi: rank {}: aborted during setup", rank_);
    if (deadline.expired()) {
      std::string silent;
      for (size_t k = 0; k < peers.size(); ++k)
        if (!helloOps_[2 * k].done || !helloOps_[2 * k + 1].done)
          silent += fmt::format(" rank {} at {};", peers[k], peers_[peers[k]].address);
      return fail(snclTimeout, "ofi: rank {}: no answer over {} within the setup deadline from:{}", rank_,
                  fabric_.provider(), silent);
    }
    wait(1000);
  }
  for (int p : peers) postSlots(p);
  for (int p : peers)
    if (peers_[p].error != snclSuccess) return fail(peers_[p].error, "{}", peers_[p].message);
  return snclSuccess;
}

void OfiTransport::wait(int64_t maxMicros) {
  if (aborted_.load(std::memory_order_relaxed)) return;
  // Reading the CQ is what moves the provider's protocols (rendezvous, connections) on
  // under manual progress: sleep only after a read, and not at all when it completed
  // something, which may be what the caller waits for (a sleep there costs the whole
  // timeout whenever the provider does not signal the fd).
  if (progressNow()) return;
  // With a core of its own (the comm's wait policy), keep reading the CQ for a while
  // before sleeping: a reply over loopback TCP comes back in tens of microseconds, the
  // sleep and wake-up around it cost as much again.
  if (const int64_t spin = std::min(spinMicros(), maxMicros); spin > 0) {
    const auto until = Clock::now() + std::chrono::microseconds(spin);
    do {
      if (progressNow()) return;
    } while (Clock::now() < until);
  }
  // Without a core of its own, let the peer this rank waits for run first (as shm does).
  for (int i = 0; i < yieldsHere(); ++i) {
    sched_yield();
    if (progressNow()) return;
  }
  pollfd fds[2];
  const int n = sleepFds(fds);
  if (n < 0) return;
  const int64_t us = std::max<int64_t>(maxMicros, 0);
  const timespec ts{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
  ppoll(fds, nfds_t(n), &ts, nullptr);
}

int OfiTransport::sleepFds(pollfd fds[2]) {
  fds[0] = {abortFd_, POLLIN, 0};
  if (fabric_.waitFd() < 0) return 1;
  // fi_trywait says whether sleeping on the fd is safe: not when completions are queued
  // (or the provider has work that only a read would do); then return at once.
  fid* cq = &fabric_.cq()->fid;
  if (fi_trywait(fabric_.fabric(), &cq, 1) != FI_SUCCESS) return -1;
  fds[1] = {fabric_.waitFd(), POLLIN, 0};
  return 2;
}

void OfiTransport::abort() {
  if (aborted_.exchange(true)) return;
  // Should the write fail, the flag alone still fails every later call, and a sleeping
  // wait() returns at its timeout.
  const uint64_t one = 1;
  if (abortFd_ >= 0) [[maybe_unused]] ssize_t n = write(abortFd_, &one, sizeof(one));
}

}  // namespace ofi
}  // namespace sncl

