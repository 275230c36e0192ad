#include "tests/util/shared_calls.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <csignal>
#include <random>

#include "lib/comm/comm.h"
#include "lib/exec/reduce.h"
#include "lib/plan/cost_model.h"
#include "lib/transport/shared_mem.h"
#include "tests/util/data.h"


namespace sncl::test::shared {
namespace {

constexpr size_t kGuard = 64;        // bytes around every output that no call may touch
constexpr uint8_t kSentinel = 0xa5;

// The dtypes and ops drawn: bfloat16 and half are reduced by the same kernels in the
// reference, so their rounding is the library's.
const snclDataType_t kTypes[] = {snclInt32, snclUint8, snclInt64, snclFloat32, snclFloat64, snclBfloat16, snclFloat16};
const snclRedOp_t kOps[] = {snclSum, snclProd, snclMax, snclMin, snclAvg};

Call drawCall(std::mt19937_64& g, int nranks, const Draw& d) {
  Call c;
  c.coll = d.colls[g() % d.colls.size()];
  c.root = int(g() % uint64_t(nranks));
  c.inPlace = g() % 2;
  for (;;) {
    c.type = kTypes[g() % (sizeof(kTypes) / sizeof(kTypes[0]))];
    c.op = kOps[g() % (sizeof(kOps) / sizeof(kOps[0]))];
    if (d.orderFree && !dtypeInteger(c.type) && c.op != snclMax && c.op != snclMin) continue;
    if (reduceKernel(c.type, c.op == snclAvg ? snclSum : c.op)) break;
  }
  const size_t es = dtypeSize(c.type);
  size_t maxBytes = d.maxRankBytes;
  if (c.coll == Coll::AllGather || c.coll == Coll::ReduceScatter)
    maxBytes = std::min(maxBytes, d.maxTotalBytes / size_t(nranks));
  const size_t minCount = kCellBytes / es + 1;  // the first count above the cells
  const size_t maxCount = std::max(minCount, maxBytes / es);
  // Just above the cells, primes, odd counts, anything up to the largest.
  const size_t picks[] = {minCount, minCount + 1, minCount + 2, 4099, 8191, 65537, 131071, 262147};
  const int kind = int(g() % 4);
  if (kind == 0) {
    c.count = picks[g() % (sizeof(picks) / sizeof(picks[0]))];
  } else if (kind == 1) {
    c.count = minCount + g() % std::min<size_t>(maxCount - minCount + 1, 20000 / es);
  } else {
    c.count = minCount + g() % (maxCount - minCount + 1);
  }
  c.count = std::clamp(c.count, minCount, maxCount);
  if (kind == 3) c.count |= 1;  // odd
  if (d.small && g() % 4 == 0) {
    c.count = g() % minCount;
    // A small Reduce-Scatter runs the planner's schedule, which reduces in its own order.
    if (c.coll == Coll::ReduceScatter && !d.orderFree) c.coll = Coll::AllReduce;
  }
  return c;
}

// Which path a call takes on a comm whose shared path is on.
bool onCells(const Call& c) {
  return c.coll != Coll::ReduceScatter && c.count * dtypeSize(c.type) <= kCellBytes;
}
bool sharedSized(const Call& c, size_t sharedMin) {
  return c.count * dtypeSize(c.type) >= sharedMin;
}

size_t inputCount(const Call& c, int nranks) {
  return c.coll == Coll::ReduceScatter ? c.count * size_t(nranks) : c.count;
}
size_t outputCount(const Call& c, int nranks) {
  return c.coll == Coll::AllGather ? c.count * size_t(nranks) : c.count;
}

// Rank r's input of call i at elements [first, first + n) (test::fillSeeded).
void fillInput(uint64_t seed, uint64_t i, int r, const Call& c, size_t first, size_t n, char* dst) {
  test::fillSeeded(c.type, seed, i, r, dst, n, first);
}

// ((in0 op in1) op in2) ... at elements [first, first + n) of the inputs, avg scaled
// after: the order the shared path promises.
void reduceRef(uint64_t seed, uint64_t i, int nranks, const Call& c, size_t first, size_t n, std::vector<char>* out,
               std::vector<char>* tmp) {
  const size_t es = dtypeSize(c.type);
  const ReduceFn fn = reduceKernel(c.type, c.op == snclAvg ? snclSum : c.op);
  out->resize(n * es);
  tmp->resize(n * es);
  fillInput(seed, i, 0, c, first, n, out->data());
  for (int r = 1; r < nranks; ++r) {
    fillInput(seed, i, r, c, first, n, tmp->data());
    fn(out->data(), out->data(), tmp->data(), n);
  }
  if (c.op == snclAvg) scaleKernel(c.type)(out->data(), out->data(), n, 1.0 / nranks, nranks);
}

// A rank's memory for the calls: an input and an output region, from snclMemAlloc or the
// heap, larger than any call so that buffers sit at random offsets inside them.
struct Arena {
  bool shared = true;
  char* in = nullptr;
  char* out = nullptr;
  std::vector<char> heapIn, heapOut;

  Arena() = default;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() { release(); }

  std::string allocate(bool sharedMem, size_t bytes) {
    if (!release()) return std::string("snclMemFree failed: ") + snclGetLastError(nullptr);
    shared = sharedMem;
    if (!shared) {
      heapIn.assign(bytes, 0);
      heapOut.assign(bytes, 0);
      in = heapIn.data();
      out = heapOut.data();
      return "";
    }
    void* a = nullptr;
    void* o = nullptr;
    if (snclMemAlloc(&a, bytes) != snclSuccess) return std::string("snclMemAlloc failed: ") + snclGetLastError(nullptr);
    in = static_cast<char*>(a);
    if (snclMemAlloc(&o, bytes) != snclSuccess) return std::string("snclMemAlloc failed: ") + snclGetLastError(nullptr);
    out = static_cast<char*>(o);
    return "";
  }
  bool release() {
    bool ok = true;
    if (shared) {
      ok &= snclMemFree(in) == snclSuccess;  // NULL: a no-op
      ok &= snclMemFree(out) == snclSuccess;
    }
    heapIn = {};
    heapOut = {};
    in = out = nullptr;
    return ok;
  }
};

// The slack around buffers in an arena: random offsets up to this, plus the guards.
constexpr size_t kSlack = 8192;
size_t arenaBytes(const Draw& d) {
  return std::max(d.maxRankBytes, d.maxTotalBytes) + kCellBytes * 2 + kSlack + 2 * kGuard;
}

// Whether the path cannot run call c in place when rank heapRank's buffers are on the heap: when
// another rank needs to reach one of them (its outputs of All-Gather, Broadcast and
// Reduce-Scatter it writes itself; a Broadcast reads only the root's input).
bool notInPlace(const Call& c, int heapRank) {
  if (heapRank < 0) return false;
  return c.coll != Coll::Broadcast || c.root == heapRank;
}

// One call placed in its arena: buffers at random offsets, the in-place forms as the API
// wants them, unused buffers sometimes NULL, the output region between guards.
struct Placed {
  Call c;
  uint64_t index = 0;
  const void* send = nullptr;
  void* recv = nullptr;
  char* in = nullptr;   // the out-of-place input
  char* out = nullptr;  // the output region (in place: the whole buffer)
  size_t inBytes = 0, outBytes = 0;
};

Placed place(const Call& c, uint64_t index, Arena& arena, int rank, int nranks, uint64_t seed, std::mt19937_64& local) {
  Placed p;
  p.c = c;
  p.index = index;
  const size_t es = dtypeSize(c.type);
  p.inBytes = inputCount(c, nranks) * es;
  p.outBytes = outputCount(c, nranks) * es;
  // Element-aligned: the reduction kernels load typed elements (misaligned works on x86 but
  // is undefined, and UBSan stops there).
  p.in = arena.in + kGuard + (local() % (kSlack / es)) * es;
  p.out = arena.out + kGuard + (local() % (kSlack / es)) * es;
  memset(p.out - kGuard, kSentinel, std::max(p.inBytes, p.outBytes) + 2 * kGuard);
  const size_t mine = size_t(rank) * c.count * es;  // this rank's block in a gathered/scattered buffer
  p.send = p.in;
  p.recv = p.out;
  if (c.inPlace) {
    switch (c.coll) {
      case Coll::AllGather: p.send = p.out + mine; break;
      case Coll::ReduceScatter: p.send = p.out, p.recv = p.out + mine; break;
      default: p.send = p.out; break;
    }
  }
  const bool noInput = c.coll == Coll::Broadcast && rank != c.root;
  if (!noInput) fillInput(seed, index, rank, c, 0, inputCount(c, nranks), const_cast<char*>(static_cast<const char*>(p.send)));
  // Buffers a rank does not use may be NULL (sncl.h): a shared call must not reach them.
  if (!c.inPlace && local() % 4 == 0) {
    if (noInput) p.send = nullptr;
    if (c.coll == Coll::Reduce && rank != c.root) p.recv = nullptr;
  }
  return p;
}

snclResult_t issue(const Placed& p, snclComm_t comm, snclStream_t stream) {
  const Call& c = p.c;
  switch (c.coll) {
    case Coll::AllReduce: return snclAllReduce(p.send, p.recv, c.count, c.type, c.op, comm, stream);
    case Coll::AllGather: return snclAllGather(p.send, p.recv, c.count, c.type, comm, stream);
    case Coll::Broadcast: return snclBroadcast(p.send, p.recv, c.count, c.type, c.root, comm, stream);
    case Coll::Reduce: return snclReduce(p.send, p.recv, c.count, c.type, c.op, c.root, comm, stream);
    case Coll::ReduceScatter: return snclReduceScatter(p.send, p.recv, c.count, c.type, c.op, comm, stream);
  }
  return snclInternalError;
}

// Every byte of the call's output against the rank-order reference, the guards, and the
// input out of place; "" or what is wrong.
std::string verify(const Placed& p, int rank, int nranks, uint64_t seed, std::vector<char>& expect,
                   std::vector<char>& tmp) {
  const Call& c = p.c;
  const size_t es = dtypeSize(c.type);
  const uint64_t i = p.index;
  bool hasOutput = true;  // whether this rank's recv is the call's output
  switch (c.coll) {
    case Coll::AllReduce: reduceRef(seed, i, nranks, c, 0, c.count, &expect, &tmp); break;
    case Coll::Reduce:
      hasOutput = rank == c.root;
      if (hasOutput) reduceRef(seed, i, nranks, c, 0, c.count, &expect, &tmp);
      break;
    case Coll::ReduceScatter: reduceRef(seed, i, nranks, c, size_t(rank) * c.count, c.count, &expect, &tmp); break;
    case Coll::Broadcast:
      expect.resize(p.outBytes);
      fillInput(seed, i, c.root, c, 0, c.count, expect.data());
      break;
    case Coll::AllGather:
      expect.resize(p.outBytes);
      for (int k = 0; k < nranks; ++k) fillInput(seed, i, k, c, 0, c.count, expect.data() + size_t(k) * c.count * es);
      break;
  }
  const char* got = static_cast<const char*>(p.recv);
  if (hasOutput && memcmp(got, expect.data(), expect.size()) != 0) {
    size_t at = 0;
    while (at < expect.size() && got[at] == expect[at]) ++at;
    return "wrong bytes from byte " + std::to_string(at) + " of " + std::to_string(expect.size());
  }
  // Off the root of an out-of-place Reduce nothing is written.
  if (!hasOutput && !c.inPlace)
    for (size_t b = 0; b < p.outBytes; ++b)
      if (uint8_t(p.out[b]) != kSentinel) return "wrote a non-root's output";
  // Guards around the output region (the whole buffer of an in-place gather/scatter).
  const size_t region = c.inPlace ? std::max(p.inBytes, p.outBytes) : p.outBytes;
  for (size_t b = 0; b < kGuard; ++b)
    if (uint8_t(p.out[-1 - ptrdiff_t(b)]) != kSentinel || uint8_t(p.out[region + b]) != kSentinel)
      return "wrote outside the output";
  // Out of place, an input is never written.
  if (!c.inPlace && !(c.coll == Coll::Broadcast && rank != c.root)) {
    tmp.resize(p.inBytes);
    fillInput(seed, i, rank, c, 0, inputCount(c, nranks), tmp.data());
    if (memcmp(p.in, tmp.data(), p.inBytes) != 0) return "changed the input";
  }
  return "";
}

}  // namespace

uint64_t testSeed() {
  static const uint64_t seed = [] {
    const char* s = getenv("SNCL_TEST_SEED");
    const uint64_t v = s ? strtoull(s, nullptr, 0) : std::random_device{}();
    printf("test seed %llu (SNCL_TEST_SEED=%llu repeats it)\n", (unsigned long long)v,
           (unsigned long long)v);
    fflush(stdout);
    return v;
  }();
  return seed;
}

std::chrono::milliseconds::rep msSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t).count();
}

const char* collName(Coll c) {
  static const char* names[] = {"AllReduce", "AllGather", "Broadcast", "Reduce", "ReduceScatter"};
  return names[int(c)];
}

// Runs opt.calls random calls on comm, checking each; returns failures (printed).
int callLoop(snclComm_t comm, int rank, int nranks, uint64_t seed, const LoopOptions& opt, snclResult_t* lastResult) {
  std::mt19937_64 shared(seed);
  std::mt19937_64 local(seed ^ (uint64_t(rank + 7) << 32));
  std::vector<Arena> arenas(size_t(std::max(opt.perGroup, opt.pool)));
  std::vector<Placed> placed;
  const size_t capacity = arenaBytes(opt.draw);
  const bool heap = !opt.sharedMem || rank == opt.heapRank;
  std::vector<char> expect, tmp;
  snclStream_t stream = nullptr;
  if (opt.onStream && snclStreamCreate(&stream) != snclSuccess) {
    fprintf(stderr, "rank %d: snclStreamCreate: %s\n", rank, snclGetLastError(nullptr));
    return 1;
  }
  int failures = 0;
  uint64_t wantShared = 0, wantDeclined = 0, wantStaged = 0, wantCells = 0;
  SharedRef last{};
  int fdReused = 0;  // churn: an fd number that came back holding a new file, as peers must notice
  const uint64_t calls0 = comm->cells.sharedCalls, declined0 = comm->cells.sharedDeclined, cells0 = comm->cells.calls;
  const uint64_t staged0 = comm->cells.stagedCalls;
  auto report = [&](const Call& c, uint64_t i, const std::string& what) {
    fprintf(stderr, "rank %d/%d call %llu %s type %d op %d count %zu root %d inPlace %d: %s\n", rank, nranks,
            (unsigned long long)i, collName(c.coll), int(c.type), int(c.op), c.count, c.root, int(c.inPlace),
            what.c_str());
    ++failures;
  };
  for (int i = 0; i < opt.calls && failures < 5; i += opt.perGroup) {
    placed.clear();
    for (int k = 0; k < opt.perGroup; ++k) {
      const Call c = drawCall(shared, nranks, opt.draw);
      const size_t slot = opt.pool > 0 ? local() % size_t(opt.pool) : size_t(k);
      if (!arenas[slot].in || opt.churn) {
        // Churn: a new size every call, so a freed memfd's number comes back with a new file.
        const std::string err = arenas[slot].allocate(!heap, capacity + (opt.churn ? (local() % 64) * 4096 : 0));
        if (!err.empty()) {
          report(c, i + k, err);
          return failures;
        }
        SharedRef now{};
        if (!heap && sharedFind(arenas[slot].in, 1, &now)) {
          fdReused += now.fd == last.fd && now.ino != last.ino;
          last = now;
        }
      }
      placed.push_back(place(c, uint64_t(i + k), arenas[slot], rank, nranks, seed, local));
      if (opt.expectShared && sharedSized(c, opt.sharedMin)) {
        const bool inPlace = opt.threads || (opt.sharedMem && !notInPlace(c, opt.heapRank));
        const uint64_t stagedMax =
            opt.stagedMaxBytes >= 0 ? uint64_t(opt.stagedMaxBytes) : defaultTuning().stagedMaxAt(nranks);
        const bool staged = opt.staged && c.count * dtypeSize(c.type) <= stagedMax;
        ++(inPlace ? wantShared : staged ? wantStaged : wantDeclined);
      }
      if (opt.expectShared && onCells(c)) ++wantCells;
    }
    if (rank == opt.killRank && i >= opt.killAt) raise(SIGKILL);
    if (opt.callStart) *opt.callStart = std::chrono::steady_clock::now();
    snclResult_t r = snclSuccess;
    if (opt.perGroup > 1) snclGroupStart();
    for (const Placed& p : placed)
      if (r == snclSuccess) r = issue(p, comm, stream);
    if (opt.perGroup > 1) {
      const snclResult_t end = snclGroupEnd();
      if (r == snclSuccess) r = end;
    }
    if (r == snclSuccess && stream) r = snclStreamSynchronize(stream);
    *lastResult = r;
    if (r != snclSuccess) {
      report(placed[0].c, uint64_t(i), snclGetLastError(comm));
      break;
    }
    for (const Placed& p : placed) {
      const std::string wrong = verify(p, rank, nranks, seed, expect, tmp);
      if (!wrong.empty()) report(p.c, p.index, wrong);
    }
  }
  if (stream) snclStreamDestroy(stream);
  if (opt.churn && !heap && failures == 0 && opt.calls >= 10 && fdReused == 0) {
    fprintf(stderr, "rank %d/%d: no allocation reused an fd number: churn tested nothing\n", rank, nranks);
    ++failures;
  }
  const uint64_t ran = comm->cells.sharedCalls - calls0, declined = comm->cells.sharedDeclined - declined0;
  const uint64_t cells = comm->cells.calls - cells0, staged = comm->cells.stagedCalls - staged0;
  if (failures == 0 && (ran != wantShared || declined != wantDeclined || staged != wantStaged ||
                        (opt.expectShared && cells != wantCells))) {
    fprintf(stderr,
            "rank %d/%d: %llu calls on shared buffers, %llu staged, %llu declined, %llu on the cells; expected %llu, "
            "%llu, %llu, %llu\n",
            rank, nranks, (unsigned long long)ran, (unsigned long long)staged, (unsigned long long)declined,
            (unsigned long long)cells, (unsigned long long)wantShared, (unsigned long long)wantStaged,
            (unsigned long long)wantDeclined, (unsigned long long)wantCells);
    ++failures;
  }
  return failures;
}

// Checks that comm has the shared path as expected; "" or why not.
std::string pathState(snclComm_t comm, bool sharedOn, size_t sharedMin) {
  if (!comm->cells.transport) return "the cells path is off";
  if (comm->cells.shared != sharedOn)
    return std::string("comm->cells.shared is ") + (comm->cells.shared ? "on" : "off");
  if (sharedOn && comm->cells.sharedMinBytes != sharedMin)
    return "sharedMinBytes " + std::to_string(comm->cells.sharedMinBytes);
  return "";
}

// One process rank: init, check the path's state, run the loop, destroy.
int processRank(int rank, int nranks, const snclUniqueId& id, uint64_t seed, const LoopOptions& opt, bool sharedOn) {
  snclComm_t comm = nullptr;
  if (snclCommInitRank(&comm, nranks, id, rank) != snclSuccess) {
    fprintf(stderr, "rank %d: init failed: %s\n", rank, snclGetLastError(nullptr));
    return 2;
  }
  const std::string state = pathState(comm, sharedOn, opt.sharedMin);
  if (!state.empty()) {
    fprintf(stderr, "rank %d: %s\n", rank, state.c_str());
    snclCommDestroy(comm);
    return 3;
  }
  snclResult_t last = snclSuccess;
  int failures = callLoop(comm, rank, nranks, seed, opt, &last);
  if (snclCommDestroy(comm) != snclSuccess) ++failures;
  return failures ? 1 : 0;
}

}  // namespace sncl::test::shared
