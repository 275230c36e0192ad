#include "tools/randtest/rank.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tools/randtest/reference.h"

namespace randtest {

namespace {

constexpr size_t kGuard = 64;
constexpr unsigned char kGuardByte = 0xa5, kPoison = 0xcd;

// A buffer with guard bytes on both sides, starting `offset` elements past a 64-byte
// boundary, so that kernels meet unaligned data and overruns show.
struct Buf {
  std::vector<unsigned char> storage;
  unsigned char* data = nullptr;
  size_t bytes = 0;
  void make(size_t nbytes, size_t offsetBytes, unsigned char fill) {
    bytes = nbytes;
    storage.assign(nbytes + offsetBytes + 3 * kGuard, kGuardByte);
    auto base = reinterpret_cast<uintptr_t>(storage.data()) + kGuard;
    base = (base + 63) & ~uintptr_t(63);
    data = reinterpret_cast<unsigned char*>(base) + offsetBytes;
    memset(data, fill, nbytes);
  }
  bool guardsIntact() const {
    if (!data) return true;
    for (size_t i = 1; i <= kGuard; ++i)
      if (data[-static_cast<ptrdiff_t>(i)] != kGuardByte) return false;
    for (size_t i = 0; i < kGuard; ++i)
      if (data[bytes + i] != kGuardByte) return false;
    return true;
  }
};

struct P2pOp {
  bool send;
  size_t msg;  // index into the call's messages
  int peer;
};

// One call as this rank issues it.
struct CallRun {
  const Call* call = nullptr;
  std::unique_ptr<Reference> ref;
  Buf sendBuf, recvBuf;
  const void* send = nullptr;
  void* recv = nullptr;
  snclRedOp_t op = snclSum;
  bool preMulCreated = false;
  uint64_t salt = 0;
  std::vector<P2pOp> p2p;
  std::vector<Buf> msgBufs;  // one per message this rank sends or receives, by p2p index
};

struct Ctx {
  RankReport* rep;
  snclComm_t comm;
  snclStream_t stream;  // NULL: every call completes before it returns
  int me, m;
  const char* where;  // the collective being checked, for notes
};

void note(Ctx& x, Status s, const std::string& text) {
  if (x.rep->status == kPass || (x.rep->status == kWrong && s != kWrong)) {
    snprintf(x.rep->note, sizeof x.rep->note, "rank %d/%d %s: %s", x.me, x.m, x.where, text.c_str());
  }
  x.rep->status = std::max(x.rep->status, static_cast<int>(s));
}

void wrong(Ctx& x, size_t n, const std::string& what, const std::string& detail) {
  if (!n) return;
  x.rep->wrong += n;
  note(x, kWrong, std::to_string(n) + " wrong in " + what + ", first " + detail);
}

bool failed(Ctx& x, snclResult_t r, const char* what) {
  if (r == snclSuccess) return false;
  x.rep->result = r;
  note(x, r == snclTimeout ? kHang : kError,
       std::string(what) + " returned " + snclGetErrorString(r) + ": " + snclGetLastError(x.comm));
  return true;
}

uint64_t streamOf(uint64_t salt, int rank) { return mix(salt, 0x5eed0000ull + static_cast<uint64_t>(rank)); }

// The comm ranks that issue the call, with their buffers filled.
void prepare(CallRun& k, Ctx& x, uint64_t caseSeed, size_t index) {
  const Call& c = *k.call;
  const size_t elem = elemSize(c.type), n = c.count, m = static_cast<size_t>(x.m), me = static_cast<size_t>(x.me);
  const size_t off = static_cast<size_t>(c.offset) * elem;
  const int root = c.root % x.m;
  const bool isRoot = x.me == root;
  k.salt = mix(caseSeed, index);
  if (isReduction(c.coll)) {
    const size_t elements = c.coll == Coll::ReduceScatter ? m * n : n;
    k.ref = std::make_unique<Reference>(c, k.salt, x.m, elements);
    k.sendBuf.make(elements * elem, off, 0);
    k.ref->fillInput(x.me, k.sendBuf.data, elements, 0);
    k.send = k.sendBuf.data;
    if (c.coll == Coll::ReduceScatter) {
      if (c.inPlace) k.recv = k.sendBuf.data + me * n * elem;
      else k.recvBuf.make(n * elem, off, kPoison), k.recv = k.recvBuf.data;
    } else if (c.inPlace) {
      k.recv = k.sendBuf.data;
    } else if (c.coll == Coll::AllReduce || isRoot) {
      k.recvBuf.make(n * elem, off, kPoison), k.recv = k.recvBuf.data;
    }
    return;
  }
  switch (c.coll) {
    case Coll::Broadcast:
      k.recvBuf.make(n * elem, off, kPoison);
      k.recv = k.recvBuf.data;
      if (isRoot && c.inPlace) fillPattern(streamOf(k.salt, root), elem, k.recv, n, 0), k.send = k.recv;
      else if (isRoot) k.sendBuf.make(n * elem, off, 0), fillPattern(streamOf(k.salt, root), elem, k.sendBuf.data, n, 0), k.send = k.sendBuf.data;
      else k.send = c.inPlace ? k.recv : nullptr;
      break;
    case Coll::AllGather:
      k.recvBuf.make(m * n * elem, off, kPoison);
      k.recv = k.recvBuf.data;
      if (c.inPlace) k.send = k.recvBuf.data + me * n * elem;
      else k.sendBuf.make(n * elem, off, 0), k.send = k.sendBuf.data;
      fillPattern(streamOf(k.salt, x.me), elem, const_cast<void*>(k.send), n, 0);
      break;
    case Coll::AlltoAll:
      k.sendBuf.make(m * n * elem, off, 0);
      fillPattern(streamOf(k.salt, x.me), elem, k.sendBuf.data, m * n, 0);
      k.send = k.sendBuf.data;
      if (c.inPlace) k.recv = k.sendBuf.data;
      else k.recvBuf.make(m * n * elem, off, kPoison), k.recv = k.recvBuf.data;
      break;
    case Coll::Gather:
      if (isRoot) k.recvBuf.make(m * n * elem, off, kPoison), k.recv = k.recvBuf.data;
      if (isRoot && c.inPlace) k.send = k.recvBuf.data + me * n * elem;
      else k.sendBuf.make(n * elem, off, 0), k.send = k.sendBuf.data;
      fillPattern(streamOf(k.salt, x.me), elem, const_cast<void*>(k.send), n, 0);
      break;
    case Coll::Scatter:
      if (isRoot) {
        k.sendBuf.make(m * n * elem, off, 0);
        fillPattern(streamOf(k.salt, root), elem, k.sendBuf.data, m * n, 0);
        k.send = k.sendBuf.data;
      }
      if (isRoot && c.inPlace) k.recv = k.sendBuf.data + me * n * elem;
      else k.recvBuf.make(n * elem, off, kPoison), k.recv = k.recvBuf.data;
      break;
    case Coll::SendRecv: {
      // Each rank posts its sends and receives in its own random order; the messages of one
      // direction of a pair keep their order (they match in posting order).
      for (size_t j = 0; j < c.msgs.size(); ++j) {
        const int s = c.msgs[j].src % x.m, d = c.msgs[j].dst % x.m;
        if (s == x.me) k.p2p.push_back({true, j, d});
        if (d == x.me) k.p2p.push_back({false, j, s});
      }
      Rng rng(mix(k.salt, 0x0de7ull + me));
      for (size_t i = k.p2p.size(); i > 1; --i) std::swap(k.p2p[i - 1], k.p2p[rng.below(i)]);
      for (size_t i = 0; i < k.p2p.size(); ++i) {  // restore message order per (kind, peer)
        std::vector<size_t> slots, msgs;
        for (size_t j = i; j < k.p2p.size(); ++j)
          if (k.p2p[j].send == k.p2p[i].send && k.p2p[j].peer == k.p2p[i].peer) slots.push_back(j), msgs.push_back(k.p2p[j].msg);
        std::sort(msgs.begin(), msgs.end());
        for (size_t s = 0; s < slots.size(); ++s) k.p2p[slots[s]].msg = msgs[s];
        // Later slots of this (kind, peer) are fixed now; skipping them is an optimization only.
      }
      k.msgBufs.resize(k.p2p.size());
      for (size_t i = 0; i < k.p2p.size(); ++i) {
        const Msg& msg = c.msgs[k.p2p[i].msg];
        k.msgBufs[i].make(msg.count * elem, off, k.p2p[i].send ? 0 : kPoison);
        if (k.p2p[i].send) fillPattern(streamOf(k.salt, 100 + static_cast<int>(k.p2p[i].msg)), elem, k.msgBufs[i].data, msg.count, 0);
      }
      break;
    }
    default: break;
  }
}

snclResult_t issue(CallRun& k, Ctx& x) {
  const Call& c = *k.call;
  const int root = c.root % x.m;
  if (c.op == kPreMulSum) {
    Rng rng(mix(k.salt, 0xabcull));
    const auto residence = rng.chance(0.5) ? snclScalarDevice : snclScalarHostImmediate;
    snclResult_t r = snclRedOpCreatePreMulSum(&k.op, const_cast<void*>(k.ref->scalar(x.me)), c.type, residence, x.comm);
    if (r != snclSuccess) return r;
    k.preMulCreated = true;
  } else if (c.op != kNoOp) {
    k.op = static_cast<snclRedOp_t>(c.op);
  }
  ++x.rep->ops;
  switch (c.coll) {
    case Coll::AllReduce: return snclAllReduce(k.send, k.recv, c.count, c.type, k.op, x.comm, x.stream);
    case Coll::Broadcast: return snclBroadcast(k.send, k.recv, c.count, c.type, root, x.comm, x.stream);
    case Coll::Reduce: return snclReduce(k.send, k.recv, c.count, c.type, k.op, root, x.comm, x.stream);
    case Coll::AllGather: return snclAllGather(k.send, k.recv, c.count, c.type, x.comm, x.stream);
    case Coll::ReduceScatter: return snclReduceScatter(k.send, k.recv, c.count, c.type, k.op, x.comm, x.stream);
    case Coll::AlltoAll: return snclAlltoAll(k.send, k.recv, c.count, c.type, x.comm, x.stream);
    case Coll::Gather: return snclGather(k.send, k.recv, c.count, c.type, root, x.comm, x.stream);
    case Coll::Scatter: return snclScatter(k.send, k.recv, c.count, c.type, root, x.comm, x.stream);
    case Coll::SendRecv: {
      --x.rep->ops;
      for (size_t i = 0; i < k.p2p.size(); ++i) {
        ++x.rep->ops;
        const size_t count = c.msgs[k.p2p[i].msg].count;
        snclResult_t r = k.p2p[i].send ? snclSend(k.msgBufs[i].data, count, c.type, k.p2p[i].peer, x.comm, x.stream)
                                       : snclRecv(k.msgBufs[i].data, count, c.type, k.p2p[i].peer, x.comm, x.stream);
        if (r != snclSuccess) return r;
      }
      return snclSuccess;
    }
    default: return snclInternalError;
  }
}

void check(CallRun& k, Ctx& x) {
  const Call& c = *k.call;
  const size_t elem = elemSize(c.type), n = c.count, m = static_cast<size_t>(x.m), me = static_cast<size_t>(x.me);
  const int root = c.root % x.m;
  const bool isRoot = x.me == root;
  auto* recv = static_cast<const unsigned char*>(k.recv);
  std::string d;
  size_t bad = 0;
  switch (c.coll) {
    case Coll::AllReduce:
    case Coll::Reduce:
      if (c.coll == Coll::AllReduce || isRoot) bad = k.ref->checkResult(recv, n, 0, &d), wrong(x, bad, "the result", d);
      else if (c.inPlace) bad = k.ref->checkResult(k.send, n, 0, &d, x.me), wrong(x, bad, "the input off the root", d);
      break;
    case Coll::ReduceScatter:
      bad = k.ref->checkResult(recv, n, me * n, &d), wrong(x, bad, "the result", d);
      break;
    case Coll::Broadcast:
      bad = checkPattern(streamOf(k.salt, root), elem, recv, n, 0, &d), wrong(x, bad, "the result", d);
      break;
    case Coll::AllGather:
    case Coll::AlltoAll:
    case Coll::Gather:
      if (c.coll == Coll::Gather && !isRoot) break;
      for (size_t p = 0; p < m; ++p) {
        bad = checkPattern(streamOf(k.salt, static_cast<int>(p)), elem, recv + p * n * elem, n,
                           c.coll == Coll::AlltoAll ? me * n : 0, &d);
        wrong(x, bad, "block " + std::to_string(p), d);
      }
      break;
    case Coll::Scatter:
      bad = checkPattern(streamOf(k.salt, root), elem, recv, n, me * n, &d), wrong(x, bad, "the result", d);
      break;
    case Coll::SendRecv:
      for (size_t i = 0; i < k.p2p.size(); ++i) {
        if (k.p2p[i].send) continue;
        const Msg& msg = c.msgs[k.p2p[i].msg];
        bad = checkPattern(streamOf(k.salt, 100 + static_cast<int>(k.p2p[i].msg)), elem, k.msgBufs[i].data, msg.count, 0, &d);
        wrong(x, bad, "message " + std::to_string(k.p2p[i].msg) + " from " + std::to_string(k.p2p[i].peer), d);
      }
      break;
    default: break;
  }
  // Inputs stay as they were (out of place, and the root's input of an in-place scatter).
  if (k.sendBuf.data && (!c.inPlace || c.coll == Coll::Scatter)) {
    const size_t count = k.sendBuf.bytes / std::max<size_t>(elem, 1);
    if (k.ref) bad = k.ref->checkResult(k.sendBuf.data, count, 0, &d, x.me);
    else bad = checkPattern(streamOf(k.salt, c.coll == Coll::Broadcast || c.coll == Coll::Scatter ? root : x.me), elem,
                            k.sendBuf.data, count, 0, &d);
    wrong(x, bad, "the send buffer", d);
  }
  for (size_t i = 0; i < k.p2p.size(); ++i) {
    if (!k.p2p[i].send) continue;
    bad = checkPattern(streamOf(k.salt, 100 + static_cast<int>(k.p2p[i].msg)), elem, k.msgBufs[i].data,
                       c.msgs[k.p2p[i].msg].count, 0, &d);
    wrong(x, bad, "a send buffer", d);
  }
  bool guards = k.sendBuf.guardsIntact() && k.recvBuf.guardsIntact();
  for (const Buf& b : k.msgBufs) guards = guards && b.guardsIntact();
  if (!guards) wrong(x, 1, "the guard bytes around a buffer", "written past a buffer's end or before its start");
}

// The rank in the split's comm that snclCommSplit promises: order by (key, world rank).
void splitRankOf(const Case& c, int rank, int* subRank, int* subSize) {
  std::vector<std::pair<int, int>> members;
  for (int r = 0; r < c.world.nranks; ++r)
    if (c.colors[r] == c.colors[rank]) members.push_back({c.keys[r], r});
  std::sort(members.begin(), members.end());
  *subSize = static_cast<int>(members.size());
  for (int i = 0; i < *subSize; ++i)
    if (members[i].second == rank) *subRank = i;
}

}  // namespace

bool runCase(const Case& c, int rank, snclComm_t world, RankReport* rep) {
  *rep = RankReport{};
  Ctx x{rep, world, nullptr, rank, c.world.nranks, "split"};
  snclComm_t sub = nullptr;
  if (!c.colors.empty()) {
    if (failed(x, snclCommSplit(world, c.colors[rank], c.keys[rank], &sub, nullptr), "snclCommSplit")) return false;
    if (c.colors[rank] == SNCL_SPLIT_NOCOLOR) {
      if (sub) note(x, kError, "SNCL_SPLIT_NOCOLOR gave a comm");
      return rep->status == kPass;
    }
    int subRank = -1, subSize = -1, gotRank = -2, gotSize = -2;
    splitRankOf(c, rank, &subRank, &subSize);
    snclCommUserRank(sub, &gotRank);
    snclCommCount(sub, &gotSize);
    if (gotRank != subRank || gotSize != subSize) {
      note(x, kError, "split gave rank " + std::to_string(gotRank) + "/" + std::to_string(gotSize) + ", expected " +
                          std::to_string(subRank) + "/" + std::to_string(subSize));
      snclCommDestroy(sub);
      return false;
    }
    x.comm = sub, x.me = subRank, x.m = subSize;
  }
  std::vector<CallRun> runs(c.calls.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    runs[i].call = &c.calls[i];
    x.where = collName(c.calls[i].coll);
    prepare(runs[i], x, c.seed, i);
  }
  if (c.stream && failed(x, snclStreamCreate(&x.stream), "snclStreamCreate")) x.stream = nullptr;
  size_t completed = 0;  // calls known to have completed (issued, with a stream)
  if (c.group) {
    x.where = "group";
    bool ok = !failed(x, snclGroupStart(), "snclGroupStart");
    for (size_t i = 0; ok && i < runs.size(); ++i) {
      x.where = collName(c.calls[i].coll);
      if (failed(x, issue(runs[i], x), "the call")) break;
    }
    x.where = "group";
    // Ends the group even after a failed call (the group then fails as a whole).
    if (ok && !failed(x, snclGroupEnd(), "snclGroupEnd") && rep->status == kPass) completed = runs.size();
  } else {
    for (size_t i = 0; i < runs.size(); ++i) {
      x.where = collName(c.calls[i].coll);
      const bool p2p = c.calls[i].coll == Coll::SendRecv;  // sends and receives need a group
      if (p2p && failed(x, snclGroupStart(), "snclGroupStart")) break;
      snclResult_t r = issue(runs[i], x);
      if (p2p) {
        snclResult_t e = snclGroupEnd();
        if (r == snclSuccess) r = e;
      }
      if (failed(x, r, "the call")) break;
      completed = i + 1;
    }
  }
  if (x.stream) {
    // Errors of queued calls come out here; then nothing issued is known to be right.
    x.where = "stream";
    if (failed(x, snclStreamSynchronize(x.stream), "snclStreamSynchronize")) completed = 0;
  }
  for (size_t i = 0; i < completed; ++i) {
    x.where = collName(c.calls[i].coll);
    check(runs[i], x);
  }
  if (x.stream) snclStreamDestroy(x.stream);
  for (CallRun& k : runs)
    if (k.preMulCreated) snclRedOpDestroy(k.op, x.comm);
  const bool usable = rep->status == kPass || rep->status == kWrong;
  if (sub) {
    snclResult_t r = usable ? snclCommDestroy(sub) : snclCommAbort(sub);
    if (usable) failed(x, r, "snclCommDestroy(split)");
  }
  return rep->status == kPass || rep->status == kWrong;
}

}  // namespace randtest
