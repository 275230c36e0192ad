// Collectives on shared buffers (snclMemAlloc, lib/transport/shared_mem.*,
// lib/exec/shared_colls.*) on real ranks: the allocation API's bad inputs; random
// collectives, dtypes, ops, counts above the cell size, roots, in-place forms and offsets
// inside larger allocations, with a printed seed, bit for bit against a rank-order
// reference, checking that the shared path really ran (comm->cells.sharedCalls); one rank's
// heap buffer declining the path on every rank; threads; groups and streams; allocations
// freed and made again every call (peers remap) or more than a process keeps mapped; calls
// that differ across ranks; a peer killed mid-loop; SNCL_SHM_DIRECT(_MIN_BYTES); a split comm.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "lib/comm/comm.h"
#include "lib/exec/reduce.h"
#include "lib/transport/shared_mem.h"
#include "sncl/sncl.h"
#include "tests/util/data.h"
#include "tests/util/launcher.h"

using namespace sncl;

namespace {

constexpr size_t kCellBytes = 4096;  // shm.h's default cell size: the shared path starts above it
constexpr size_t kGuard = 64;        // bytes around every output that no call may touch
constexpr uint8_t kSentinel = 0xa5;

uint64_t testSeed() {
  static const uint64_t seed = [] {
    const char* s = getenv("SNCL_TEST_SEED");
    const uint64_t v = s ? strtoull(s, nullptr, 0) : std::random_device{}();
    printf("test_shared_buffers seed %llu (SNCL_TEST_SEED=%llu repeats it)\n", (unsigned long long)v,
           (unsigned long long)v);
    fflush(stdout);
    return v;
  }();
  return seed;
}

std::chrono::milliseconds::rep msSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t).count();
}

enum class Coll { AllReduce, AllGather, Broadcast, Reduce, ReduceScatter };
const char* collName(Coll c) {
  static const char* names[] = {"AllReduce", "AllGather", "Broadcast", "Reduce", "ReduceScatter"};
  return names[int(c)];
}

// One call, the same on every rank (drawn from the shared seed).
struct Call {
  Coll coll = Coll::AllReduce;
  snclDataType_t type = snclFloat32;
  snclRedOp_t op = snclSum;
  size_t count = 0;  // as the API counts: AllGather per rank's input, ReduceScatter per output
  int root = 0;
  bool inPlace = false;
};

// What a loop draws. orderFree: only reductions whose result does not depend on the order
// in which ranks combine (integers, max/min), for calls the planner's schedule runs.
struct Draw {
  bool orderFree = false;
  size_t maxRankBytes = 3 << 20;   // a rank's block, at most
  size_t maxTotalBytes = 4 << 20;  // a whole All-Gather output / Reduce-Scatter input, at most
  std::vector<Coll> colls = {Coll::AllReduce, Coll::AllGather, Coll::Broadcast, Coll::Reduce, Coll::ReduceScatter};
  // Some calls of up to the cell size (zero included) between the shared ones: those run on
  // the cells, so the two paths alternate on the same cells.
  bool small = false;
};

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

// Rank r's input of call i at elements [first, first + n), computed anywhere from
// (seed, i, r). Floats are finite with full mantissas (rank order shows in the rounding)
// and small enough that an 8-rank product stays finite; integers are arbitrary bits.
void fillInput(uint64_t seed, uint64_t i, int r, const Call& c, size_t first, size_t n, char* dst) {
  const size_t es = dtypeSize(c.type);
  const uint64_t key = test::mix64(seed ^ (i * 0x9e3779b97f4a7c15ull) ^ (uint64_t(r + 1) << 40));
  const double range = c.type == snclFloat16 || c.type == snclBfloat16 ? 2.0 : 100.0;
  for (size_t e = 0; e < n; ++e) {
    const uint64_t h = test::mix64(key + first + e);
    if (dtypeInteger(c.type)) {
      memcpy(dst + e * es, &h, es);
    } else {
      const double unit = double(h >> 11) * 0x1p-53;  // [0, 1)
      test::storeElement(c.type, dst, e, (unit * 2 - 1) * range);
    }
  }
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

struct LoopOptions {
  Draw draw;
  int calls = 50;
  int perGroup = 1;          // calls issued together in one snclGroupStart/End (1: none)
  bool onStream = false;     // on a stream, then snclStreamSynchronize; else the NULL stream
  bool sharedMem = true;
  int heapRank = -1;         // this rank's buffers come from the heap (the mixed case)
  bool churn = false;        // free and allocate the arenas again before every call
  int pool = 0;              // > 0: each call in one of this many arenas, kept (peers' maps cycle)
  bool expectShared = true;  // the path is on (else it neither runs nor declines a call)
  size_t sharedMin = kCellBytes + 1;  // bytes per rank from which calls take it
  int killRank = -1, killAt = -1;
  std::chrono::steady_clock::time_point* callStart = nullptr;
};

// Whether the path declines call c when rank heapRank's buffers are on the heap: when
// another rank needs to reach one of them (its outputs of All-Gather, Broadcast and
// Reduce-Scatter it writes itself; a Broadcast reads only the root's input).
bool declinedFor(const Call& c, int heapRank) {
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
  uint64_t wantShared = 0, wantDeclined = 0, wantCells = 0;
  SharedRef last{};
  int fdReused = 0;  // churn: an fd number that came back holding a new file, as peers must notice
  const uint64_t calls0 = comm->cells.sharedCalls, declined0 = comm->cells.sharedDeclined, cells0 = comm->cells.calls;
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
      if (opt.expectShared && sharedSized(c, opt.sharedMin)) ++(declinedFor(c, opt.heapRank) ? wantDeclined : wantShared);
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
  const uint64_t cells = comm->cells.calls - cells0;
  if (failures == 0 && (ran != wantShared || declined != wantDeclined || (opt.expectShared && cells != wantCells))) {
    fprintf(stderr,
            "rank %d/%d: %llu calls on shared buffers, %llu declined, %llu on the cells; expected %llu, %llu, %llu\n",
            rank, nranks, (unsigned long long)ran, (unsigned long long)declined, (unsigned long long)cells,
            (unsigned long long)wantShared, (unsigned long long)wantDeclined, (unsigned long long)wantCells);
    ++failures;
  }
  return failures;
}

// Checks that comm has the shared path as expected; "" or why not.
std::string pathState(snclComm_t comm, bool sharedOn, size_t sharedMin = kCellBytes + 1) {
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

}  // namespace

TEST_CASE("shared: snclMemAlloc and snclMemFree check their arguments", "[shared][api]") {
  void* p = reinterpret_cast<void*>(0x1);
  CHECK(snclMemAlloc(nullptr, 4096) == snclInvalidArgument);
  CHECK(std::string(snclGetLastError(nullptr)).find("NULL") != std::string::npos);
  CHECK(snclMemAlloc(&p, 0) == snclInvalidArgument);
  CHECK(p == nullptr);
  CHECK(std::string(snclGetLastError(nullptr)).find("size") != std::string::npos);
  CHECK(snclMemAlloc(&p, SIZE_MAX) == snclInvalidArgument);
  CHECK(snclMemFree(nullptr) == snclSuccess);

  void* heap = malloc(4096);
  CHECK(snclMemFree(heap) == snclInvalidArgument);
  CHECK(std::string(snclGetLastError(nullptr)).find("snclMemFree") != std::string::npos);
  free(heap);

  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  std::mt19937_64 g(testSeed());
  const size_t sizes[] = {1, 3, 4095, 4097, 12345, (1u << 20) + 1, 1 + g() % (3u << 20)};
  for (size_t size : sizes) {
    INFO("size " << size);
    void* q = nullptr;
    REQUIRE(snclMemAlloc(&q, size) == snclSuccess);
    REQUIRE(q != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(q) % page == 0);
    // Writable to the last byte, and what was written stays.
    auto* bytes = static_cast<unsigned char*>(q);
    for (size_t b = 0; b < size; ++b) bytes[b] = static_cast<unsigned char>(b * 31 + 7);
    size_t wrong = 0;
    for (size_t b = 0; b < size; ++b) wrong += bytes[b] != static_cast<unsigned char>(b * 31 + 7);
    CHECK(wrong == 0);
    if (size > 1) {
      CHECK(snclMemFree(bytes + 1) == snclInvalidArgument);  // into the middle
      CHECK(snclMemFree(bytes + size / 2 + 1) == snclInvalidArgument);
    }
    CHECK(snclMemFree(q) == snclSuccess);
    CHECK(snclMemFree(q) == snclInvalidArgument);  // twice
    CHECK(std::string(snclGetLastError(nullptr)).size() > 10);
  }
}

TEST_CASE("shared: snclMemAlloc and snclMemFree from several threads at once", "[shared][api][threads]") {
  constexpr int kThreads = 4;
  const uint64_t seed = testSeed();
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937_64 g(seed ^ uint64_t(t + 1));
      std::vector<char*> live;
      for (int i = 0; i < 300; ++i) {
        if (live.size() < 8 && g() % 2 == 0) {
          const size_t size = 1 + g() % 100000;
          void* p = nullptr;
          if (snclMemAlloc(&p, size) != snclSuccess || !p) {
            ++failures[t];
            continue;
          }
          memset(p, t, size);
          live.push_back(static_cast<char*>(p));
        } else if (!live.empty()) {
          const size_t k = g() % live.size();
          failures[t] += live[k][0] != char(t);  // no other thread's allocation overlaps it
          failures[t] += snclMemFree(live[k]) != snclSuccess;
          live.erase(live.begin() + ptrdiff_t(k));
        }
      }
      for (char* p : live) failures[t] += snclMemFree(p) != snclSuccess;
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) CHECK(failures[t] == 0);
}

TEST_CASE("shared: random collectives on snclMemAlloc buffers across processes", "[shared][process]") {
  testSeed();  // drawn (and printed) before the fork: every rank uses it
  for (int nranks : {2, 3, 4, 8}) {
    INFO("nranks " << nranks);
    LoopOptions opt;
    opt.calls = nranks <= 4 ? 80 : 40;
    opt.draw.small = true;
    if (nranks == 8) opt.draw.maxRankBytes = opt.draw.maxTotalBytes = 2 << 20;
    const uint64_t seed = testSeed() + uint64_t(nranks);
    auto exits = test::runRanks(nranks, [&](int rank, int n, const snclUniqueId& id) {
      return processRank(rank, n, id, seed, opt, true);
    }, 300000);
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("shared: one rank's heap buffers make every rank decline, results still right", "[shared][process]") {
  testSeed();
  for (int nranks : {3, 4}) {
    INFO("nranks " << nranks);
    LoopOptions opt;
    opt.calls = 80;
    opt.draw.orderFree = true;  // declined calls run the planner's schedule, in its own order
    opt.draw.maxRankBytes = 256 << 10;
    opt.draw.maxTotalBytes = 512 << 10;
    opt.draw.small = true;
    opt.heapRank = int(testSeed() % uint64_t(nranks));
    const uint64_t seed = testSeed() ^ 0x4ea9;
    printf("mixed buffers: %d ranks, rank %d on the heap\n", nranks, opt.heapRank);
    auto exits = test::runRanks(nranks, [&](int rank, int n, const snclUniqueId& id) {
      return processRank(rank, n, id, seed, opt, true);
    }, 300000);
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("shared: threads of snclCommInitAll share heap buffers", "[shared][threads]") {
  constexpr int n = 4;
  testSeed();
  std::vector<snclComm_t> comms(n);
  REQUIRE(snclCommInitAll(comms.data(), n, nullptr) == snclSuccess);
  for (int r = 0; r < n; ++r) CHECK(pathState(comms[r], true) == "");
  // The heap (threads of one process read each other's memory anyway), then snclMemAlloc.
  for (bool sharedMem : {false, true}) {
    INFO((sharedMem ? "snclMemAlloc buffers" : "heap buffers"));
    LoopOptions opt;
    opt.calls = 40;
    opt.sharedMem = sharedMem;
    opt.draw.small = true;
    opt.draw.maxRankBytes = 1 << 20;
    opt.draw.maxTotalBytes = 2 << 20;
    std::vector<int> failures(n, 0);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        snclResult_t last = snclSuccess;
        failures[r] = callLoop(comms[r], r, n, testSeed() ^ (sharedMem ? 0x7418 : 0x7417), opt, &last);
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) CHECK(failures[r] == 0);
  }
  for (int r = 0; r < n; ++r) CHECK(snclCommDestroy(comms[r]) == snclSuccess);
}

TEST_CASE("shared: calls in groups and on a stream", "[shared][process]") {
  testSeed();
  for (bool onStream : {false, true}) {
    INFO((onStream ? "on a stream" : "groups on the NULL stream"));
    LoopOptions opt;
    opt.calls = 36;
    opt.perGroup = 3;
    opt.onStream = onStream;
    opt.draw.small = true;
    opt.draw.maxRankBytes = 512 << 10;
    opt.draw.maxTotalBytes = 1 << 20;
    const uint64_t seed = testSeed() ^ (onStream ? 0x57ea : 0x6409);
    auto exits = test::runRanks(3, [&](int rank, int n, const snclUniqueId& id) {
      return processRank(rank, n, id, seed, opt, true);
    }, 300000);
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("shared: buffers freed and allocated again before every call", "[shared][process]") {
  testSeed();
  LoopOptions opt;
  opt.calls = 80;
  opt.churn = true;
  opt.draw.maxRankBytes = 128 << 10;
  opt.draw.maxTotalBytes = 256 << 10;
  const uint64_t seed = testSeed() ^ 0xc4u;
  auto exits = test::runRanks(4, [&](int rank, int n, const snclUniqueId& id) {
    return processRank(rank, n, id, seed, opt, true);
  }, 300000);
  CHECK(test::allSucceeded(exits));
}

TEST_CASE("shared: many live allocations per peer", "[shared][process]") {
  testSeed();
  LoopOptions opt;
  opt.calls = 200;
  opt.pool = 20;  // 40 allocations per rank: 120 of the 3 peers mapped at once
  opt.draw.maxRankBytes = 32 << 10;
  opt.draw.maxTotalBytes = 64 << 10;
  const uint64_t seed = testSeed() ^ 0x9001;
  auto exits = test::runRanks(4, [&](int rank, int n, const snclUniqueId& id) {
    return processRank(rank, n, id, seed, opt, true);
  }, 300000);
  CHECK(test::allSucceeded(exits));
}

TEST_CASE("shared: a count that differs on one rank fails every rank, no hang", "[shared][process]") {
  constexpr int kTimeoutMs = 4000;
  testSeed();
  const int odd = int(testSeed() % 4);
  // float32: both counts above the cells; one in the cells against one above them; a
  // Reduce-Scatter whose smaller count runs the planner's schedule (no cells for it), which
  // can only end at the deadline. And a Reduce whose root differs on one rank.
  struct Variant {
    Coll coll;
    size_t count;
    bool rootDiffers;
  };
  for (Variant v : {Variant{Coll::AllReduce, 3001, false}, Variant{Coll::AllReduce, kCellBytes / 4, false},
                    Variant{Coll::ReduceScatter, kCellBytes / 4, false}, Variant{Coll::Reduce, 3001, true}}) {
    INFO(collName(v.coll) << " count " << v.count << ", rank " << odd << " passes "
                          << (v.rootDiffers ? "another root" : "count + 1"));
    printf("differing calls: %s, rank %d passes %s\n", collName(v.coll), odd,
           v.rootDiffers ? "root 1, the others 0" : (std::to_string(v.count + 1) + ", the others " + std::to_string(v.count)).c_str());
    auto exits = test::runRanks(4, [&](int rank, int n, const snclUniqueId& id) {
      snclConfig_t config = SNCL_CONFIG_INITIALIZER;
      config.timeoutMs = kTimeoutMs;
      snclComm_t comm = nullptr;
      if (snclCommInitRankConfig(&comm, n, id, rank, &config) != snclSuccess) return 2;
      if (!comm->cells.shared) return 3;
      const size_t mine = v.count + (rank == odd && !v.rootDiffers ? 1 : 0);
      const int root = rank == odd && v.rootDiffers ? 1 : 0;
      const size_t bytes = 4 * (v.count + 1) * size_t(n);
      void* in = nullptr;
      void* out = nullptr;
      if (snclMemAlloc(&in, bytes) != snclSuccess || snclMemAlloc(&out, bytes) != snclSuccess) return 4;
      const auto start = std::chrono::steady_clock::now();
      snclResult_t r = snclInternalError;
      switch (v.coll) {
        case Coll::AllReduce: r = snclAllReduce(in, out, mine, snclFloat32, snclSum, comm, nullptr); break;
        case Coll::ReduceScatter: r = snclReduceScatter(in, out, mine, snclFloat32, snclSum, comm, nullptr); break;
        default: r = snclReduce(in, out, mine, snclFloat32, snclSum, root, comm, nullptr); break;
      }
      const auto ms = msSince(start);
      fprintf(stderr, "rank %d: result %d after %lld ms: %s\n", rank, int(r), (long long)ms, snclGetLastError(comm));
      snclCommAbort(comm);
      snclMemFree(in);
      snclMemFree(out);
      if (r == snclSuccess) return 5;
      if (ms > kTimeoutMs + 3000) return 6;
      return 0;
    }, 60000);
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("shared: a peer killed mid-loop fails the others in bounded time", "[shared][process][fault]") {
  constexpr int kVictim = 2;
  constexpr int kTimeoutMs = 10000;
  testSeed();
  // Killed before call 40; or by a timer at a random moment (mid-call, mid-check or while
  // its peers map its new allocations: the buffers are allocated again every call).
  for (bool timer : {false, true}) {
    INFO((timer ? "killed by a timer, buffers allocated every call" : "killed before call 40"));
    const int afterMs = 50 + int(testSeed() % 300);
    if (timer) printf("peer killed: rank %d after %d ms\n", kVictim, afterMs);
    auto exits = test::runRanks(4, [&](int rank, int n, const snclUniqueId& id) {
      snclConfig_t config = SNCL_CONFIG_INITIALIZER;
      config.timeoutMs = kTimeoutMs;
      snclComm_t comm = nullptr;
      if (snclCommInitRankConfig(&comm, n, id, rank, &config) != snclSuccess) return 2;
      LoopOptions opt;
      opt.calls = 100000;  // until a call fails
      opt.draw.colls = {Coll::AllReduce, Coll::ReduceScatter, Coll::AllGather};
      opt.draw.maxRankBytes = 64 << 10;
      opt.draw.maxTotalBytes = 128 << 10;
      opt.churn = timer;
      if (!timer) opt.killRank = kVictim, opt.killAt = 40;
      if (timer && rank == kVictim)
        std::thread([afterMs] {
          std::this_thread::sleep_for(std::chrono::milliseconds(afterMs));
          raise(SIGKILL);
        }).detach();
      auto start = std::chrono::steady_clock::now();
      opt.callStart = &start;
      snclResult_t last = snclSuccess;
      const int failures = callLoop(comm, rank, n, testSeed() ^ 0xdead, opt, &last);
      const auto ms = msSince(start);
      fprintf(stderr, "rank %d: result %d after %lld ms: %s\n", rank, int(last), (long long)ms, snclGetLastError(comm));
      snclCommAbort(comm);
      if (failures == 0 || last == snclSuccess) return 4;  // the loop ended without noticing the dead peer
      if (ms > kTimeoutMs + 3000) return 5;
      return 0;
    }, 120000);
    REQUIRE(exits.size() == 4);
    CHECK(exits[kVictim].signal == SIGKILL);
    for (int r = 0; r < 4; ++r)
      if (r != kVictim) CHECK(exits[r].code == 0);
  }
}

TEST_CASE("shared: SNCL_SHM_DIRECT=0 turns the path off", "[shared][process]") {
  testSeed();
  LoopOptions opt;
  opt.calls = 60;
  opt.expectShared = false;  // not declined either: the path is not asked
  opt.draw.orderFree = true;
  opt.draw.small = true;
  opt.draw.maxRankBytes = 256 << 10;
  opt.draw.maxTotalBytes = 512 << 10;
  const uint64_t seed = testSeed() ^ 0xd1;
  auto exits = test::runRanks(3, [&](int rank, int n, const snclUniqueId& id) {
    setenv("SNCL_SHM_DIRECT", "0", 1);
    return processRank(rank, n, id, seed, opt, false);  // and no call ran shared or declined
  }, 300000);
  CHECK(test::allSucceeded(exits));
}

TEST_CASE("shared: SNCL_SHM_DIRECT_MIN_BYTES raises the threshold", "[shared][process]") {
  testSeed();
  LoopOptions opt;
  opt.calls = 80;
  opt.sharedMin = 20000;  // calls of 4097..19999 bytes per rank run the planner's schedule
  opt.draw.orderFree = true;
  opt.draw.small = true;
  opt.draw.maxRankBytes = 64 << 10;
  opt.draw.maxTotalBytes = 128 << 10;
  const uint64_t seed = testSeed() ^ 0x3171;
  auto exits = test::runRanks(3, [&](int rank, int n, const snclUniqueId& id) {
    setenv("SNCL_SHM_DIRECT_MIN_BYTES", "20000", 1);
    return processRank(rank, n, id, seed, opt, true);
  }, 300000);
  CHECK(test::allSucceeded(exits));
}

TEST_CASE("shared: even and odd ranks of a split comm", "[shared][process]") {
  testSeed();
  LoopOptions opt;
  opt.calls = 40;
  opt.draw.small = true;
  opt.draw.maxTotalBytes = 1 << 20;
  auto exits = test::runRanks(4, [&](int rank, int n, const snclUniqueId& id) {
    snclComm_t comm = nullptr;
    if (snclCommInitRank(&comm, n, id, rank) != snclSuccess) return 2;
    snclComm_t sub = nullptr;
    if (snclCommSplit(comm, rank % 2, rank, &sub, nullptr) != snclSuccess || !sub) {
      fprintf(stderr, "rank %d: split failed: %s\n", rank, snclGetLastError(comm));
      return 3;
    }
    const std::string state = pathState(sub, true);
    if (!state.empty()) {
      fprintf(stderr, "rank %d: split comm: %s\n", rank, state.c_str());
      return 4;
    }
    snclResult_t last = snclSuccess;
    int failures = callLoop(sub, sub->rank, sub->nranks, testSeed() ^ (0x5b1 + uint64_t(rank % 2)), opt, &last);
    // And the parent afterwards, on the same kind of memory.
    failures += callLoop(comm, rank, n, testSeed() ^ 0x9a7e, opt, &last);
    if (snclCommDestroy(sub) != snclSuccess) ++failures;
    if (snclCommDestroy(comm) != snclSuccess) ++failures;
    return failures ? 1 : 0;
  }, 300000);
  CHECK(test::allSucceeded(exits));
}
