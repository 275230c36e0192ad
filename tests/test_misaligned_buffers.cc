// Collectives on buffers whose address is not a multiple of the element size (a float at
// an odd address: NCCL and MPI accept them). AllReduce, Reduce, ReduceScatter, AllGather and
// Broadcast of every dtype with every op (avg, the integer-only ones and a pre-multiplied
// sum included), in and out of place, each rank's buffers at its own byte offset
// 1..elemSize-1 from an aligned base (1-byte types: an odd address), counts drawn with a
// printed seed, on every path a call can take:
// - the cells (up to 4 KiB per rank), checked to have run;
// - the planner's schedules: comms whose SNCL_ALGO forces direct or ring/chain, small
//   Reduce-Scatters, and large calls on heap buffers of process ranks (unless the library
//   has another path for those);
// - buffers every rank reads and writes in place (threads of snclCommInitAll; snclMemAlloc
//   buffers offset by bytes in processes), checked to have run.
// Results bit for bit against a reference reduced in rank order on aligned copies; nothing
// written outside the output (the bytes just before a misaligned output included), inputs
// unchanged. The compressed All-Reduce, and every instruction set's kernels called
// directly: misaligned buffers give the bytes aligned ones give.
// Under UBSan (-DSNCL_SANITIZE=address), a typed access to such a buffer anywhere on these
// paths stops the run ("load of misaligned address").
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "lib/comm/comm.h"
#include "lib/exec/reduce.h"
#include "sncl/sncl.h"
#include "sncl/sncl_ext.h"
#include "tests/util/data.h"
#include "tests/util/launcher.h"

using namespace sncl;

namespace {

constexpr size_t kCellBytes = 4096;       // shm.h's default cell size
constexpr size_t kLargeBytes = 48 << 10;  // a rank's block above the cells, at most
constexpr size_t kGuard = 64;             // bytes before and after every output that no call may touch
constexpr uint8_t kSentinel = 0xa5;

uint64_t testSeed() {
  static const uint64_t seed = [] {
    const char* s = getenv("SNCL_TEST_SEED");
    const uint64_t v = s ? strtoull(s, nullptr, 0) : std::random_device{}();
    printf("test_misaligned_buffers seed %llu (SNCL_TEST_SEED=%llu repeats it)\n", (unsigned long long)v,
           (unsigned long long)v);
    fflush(stdout);
    return v;
  }();
  return seed;
}

enum class Coll { AllReduce, Reduce, ReduceScatter, AllGather, Broadcast };
const char* collName(Coll c) {
  static const char* names[] = {"AllReduce", "Reduce", "ReduceScatter", "AllGather", "Broadcast"};
  return names[int(c)];
}

// How the ranks run and where their buffers come from; decides each call's path.
enum class Mode { Threads, ProcessHeap, ProcessShared, Planner };
const char* modeName(Mode m) {
  static const char* names[] = {"threads, heap buffers", "processes, heap buffers", "processes, snclMemAlloc buffers",
                                "processes, SNCL_ALGO (the planner's schedules only)"};
  return names[int(m)];
}

struct Call {
  Coll coll = Coll::AllReduce;
  snclDataType_t type = snclFloat32;
  snclRedOp_t op = snclSum;  // or test::kPreMulSum
  size_t count = 0;  // as the API counts: AllGather per rank's input, ReduceScatter per output
  int root = 0;
  bool inPlace = false;
  bool large = false;  // above the cells
  // Inputs exact in every order (tests/util/data.h), for float sums and products that may
  // run the planner's schedule, which combines ranks in its own order. Elsewhere floats
  // have full mantissas, so that a reduction out of rank order would show.
  bool exact = false;
};

bool isFloat(snclDataType_t t) { return !dtypeInteger(t); }

// The path: with the cells on, a small call (not ReduceScatter) runs on them; a large one
// on the shared buffers when every rank can map them (threads; snclMemAlloc, except for a
// pre-multiplied sum, whose scaled input is in the comm's scratch). Other large calls take
// the planner's schedule or another path of the library's choosing: the test only wants
// their results right.
bool onCells(const Call& c, Mode m) { return m != Mode::Planner && !c.large && c.coll != Coll::ReduceScatter; }
bool onShared(const Call& c, Mode m) {
  return c.large && (m == Mode::Threads || (m == Mode::ProcessShared && c.op != test::kPreMulSum));
}
bool mayRunPlanner(const Call& c, Mode m) { return !onCells(c, m) && !onShared(c, m); }

size_t drawCount(std::mt19937_64& g, size_t es, bool large) {
  const size_t maxSmall = kCellBytes / es, minLarge = maxSmall + 1, maxLarge = kLargeBytes / es;
  if (!large) {
    const size_t picks[] = {0, 1, 2, 3, 7, 31, 127, maxSmall - 1, maxSmall};
    return g() % 3 == 0 ? picks[g() % (sizeof(picks) / sizeof(picks[0]))] : g() % (maxSmall + 1);
  }
  // Just above the cells, primes, odd counts, anything up to the largest.
  const size_t picks[] = {minLarge, minLarge + 1, minLarge + 2, 4099, 8191, 12289, maxLarge};
  size_t n = g() % 3 == 0 ? picks[g() % (sizeof(picks) / sizeof(picks[0]))]
                          : minLarge + g() % (maxLarge - minLarge + 1);
  if (g() % 2) n |= 1;
  return std::clamp(n, minLarge, maxLarge);
}

// Every dtype with every op it has (avg and, on integers, the bitwise and logical ops
// included) in each reducing collective, small and large; every dtype in AllGather and
// Broadcast, small and large; shuffled, so that the paths alternate on the same cells.
std::vector<Call> drawCalls(uint64_t seed, int nranks, Mode mode) {
  std::mt19937_64 g(seed);
  std::vector<Call> calls;
  for (int t = 0; t < snclNumTypes; ++t) {
    const auto type = snclDataType_t(t);
    for (bool large : {false, true}) {
      for (int o = 0; o < snclNumOps; ++o) {
        const auto op = snclRedOp_t(o);
        if (!reduceKernel(type, op == snclAvg ? snclSum : op)) continue;
        for (Coll coll : {Coll::AllReduce, Coll::Reduce, Coll::ReduceScatter}) {
          Call c;
          c.coll = coll, c.type = type, c.op = op, c.large = large;
          calls.push_back(c);
        }
      }
      for (Coll coll : {Coll::AllReduce, Coll::Reduce, Coll::ReduceScatter}) {
        Call c;
        c.coll = coll, c.type = type, c.op = test::kPreMulSum, c.large = large;
        calls.push_back(c);
      }
      for (Coll coll : {Coll::AllGather, Coll::Broadcast}) {
        Call c;
        c.coll = coll, c.type = type, c.large = large;
        calls.push_back(c);
      }
    }
  }
  for (Call& c : calls) {
    c.count = drawCount(g, dtypeSize(c.type), c.large);
    c.root = int(g() % uint64_t(nranks));
    c.inPlace = g() % 2;
    c.exact = isFloat(c.type) && (c.op == snclSum || c.op == snclProd || c.op == snclAvg || c.op == test::kPreMulSum) &&
              mayRunPlanner(c, mode);
  }
  std::shuffle(calls.begin(), calls.end(), g);
  return calls;
}

size_t inputCount(const Call& c, int nranks) {
  return c.coll == Coll::ReduceScatter ? c.count * size_t(nranks) : c.count;
}
size_t outputCount(const Call& c, int nranks) { return c.coll == Coll::AllGather ? c.count * size_t(nranks) : c.count; }

// Rank r's input of call i at elements [first, first + n), into aligned memory.
void fillInput(uint64_t seed, uint64_t i, int r, int nranks, const Call& c, size_t first, size_t n, char* dst) {
  if (c.exact) {
    test::fillInput(c.type, c.op, r, nranks, dst, n, first);
    return;
  }
  test::fillSeeded(c.type, seed, i, r, dst, n, first);
}

const char* opName(snclRedOp_t op) { return op == test::kPreMulSum ? "premulsum" : redOpName(op); }

// ((in0 op in1) op in2) ... at elements [first, first + n), avg scaled after, on aligned
// buffers. A pre-multiplied sum scales each rank's input by its scalar first, as sncl does.
void reduceRef(uint64_t seed, uint64_t i, int nranks, const Call& c, size_t first, size_t n, std::vector<char>* out,
               std::vector<char>* tmp) {
  const size_t es = dtypeSize(c.type);
  const bool preMul = c.op == test::kPreMulSum;
  const ReduceFn fn = reduceKernel(c.type, c.op == snclAvg || preMul ? snclSum : c.op);
  out->resize(n * es);
  tmp->resize(n * es);
  fillInput(seed, i, 0, nranks, c, first, n, out->data());
  if (preMul) scaleKernel(c.type)(out->data(), out->data(), n, test::preMulScalar(0), 0);
  for (int r = 1; r < nranks; ++r) {
    fillInput(seed, i, r, nranks, c, first, n, tmp->data());
    if (preMul) scaleKernel(c.type)(tmp->data(), tmp->data(), n, test::preMulScalar(r), 0);
    fn(out->data(), out->data(), tmp->data(), n);
  }
  if (c.op == snclAvg) scaleKernel(c.type)(out->data(), out->data(), n, 1.0 / nranks, nranks);
}

// A rank's memory: an input and an output region with aligned bases (snclMemAlloc's are
// page-aligned; heap ones are rounded up to 64 bytes).
struct Arena {
  bool shared = false;
  char* in = nullptr;
  char* out = nullptr;
  std::vector<char> heapIn, heapOut;

  Arena() = default;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() {
    if (shared) snclMemFree(in), snclMemFree(out);
  }
  static char* align64(char* p) { return p + (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64; }
  std::string allocate(bool sharedMem, size_t bytes) {
    shared = sharedMem;
    if (!shared) {
      heapIn.assign(bytes + 64, 0);
      heapOut.assign(bytes + 64, 0);
      in = align64(heapIn.data());
      out = align64(heapOut.data());
      return "";
    }
    void* a = nullptr;
    void* o = nullptr;
    if (snclMemAlloc(&a, bytes) != snclSuccess || snclMemAlloc(&o, bytes) != snclSuccess)
      return std::string("snclMemAlloc failed: ") + snclGetLastError(nullptr);
    in = static_cast<char*>(a);
    out = static_cast<char*>(o);
    return "";
  }
};

// The largest buffer of any call: a whole AllGather output or ReduceScatter input of 4 ranks.
constexpr int kMaxRanks = 4;
constexpr size_t kArenaBytes = kLargeBytes * kMaxRanks + 2 * kGuard + 64;

// One call placed: the input and output at this rank's own byte offsets (never a multiple
// of the element size, except for 1-byte types, which sit at odd addresses).
struct Placed {
  const void* send = nullptr;
  void* recv = nullptr;
  char* in = nullptr;   // the out-of-place input
  char* out = nullptr;  // the output region (in place: the whole buffer)
  size_t inBytes = 0, outBytes = 0;
};

size_t misalignment(std::mt19937_64& local, size_t es) { return es == 1 ? 1 : 1 + local() % (es - 1); }

Placed place(const Call& c, uint64_t index, Arena& arena, int rank, int nranks, uint64_t seed, std::mt19937_64& local,
             std::vector<char>& tmp) {
  Placed p;
  const size_t es = dtypeSize(c.type);
  p.inBytes = inputCount(c, nranks) * es;
  p.outBytes = outputCount(c, nranks) * es;
  p.in = arena.in + kGuard + misalignment(local, es);
  p.out = arena.out + kGuard + misalignment(local, es);
  memset(p.out - kGuard, kSentinel, std::max(p.inBytes, p.outBytes) + 2 * kGuard);
  const size_t mine = size_t(rank) * c.count * es;  // this rank's block of a gathered/scattered buffer
  p.send = p.in;
  p.recv = p.out;
  if (c.inPlace) {
    switch (c.coll) {
      case Coll::AllGather: p.send = p.out + mine; break;
      case Coll::ReduceScatter: p.send = p.out, p.recv = p.out + mine; break;
      default: p.send = p.out; break;
    }
  }
  if (!(c.coll == Coll::Broadcast && rank != c.root) && p.inBytes) {
    tmp.resize(p.inBytes);
    fillInput(seed, index, rank, nranks, c, 0, inputCount(c, nranks), tmp.data());
    memcpy(const_cast<void*>(p.send), tmp.data(), p.inBytes);
  }
  return p;
}

snclResult_t issueOp(const Call& c, snclRedOp_t op, const Placed& p, snclComm_t comm) {
  switch (c.coll) {
    case Coll::AllReduce: return snclAllReduce(p.send, p.recv, c.count, c.type, op, comm, nullptr);
    case Coll::Reduce: return snclReduce(p.send, p.recv, c.count, c.type, op, c.root, comm, nullptr);
    case Coll::ReduceScatter: return snclReduceScatter(p.send, p.recv, c.count, c.type, op, comm, nullptr);
    case Coll::AllGather: return snclAllGather(p.send, p.recv, c.count, c.type, comm, nullptr);
    case Coll::Broadcast: return snclBroadcast(p.send, p.recv, c.count, c.type, c.root, comm, nullptr);
  }
  return snclInternalError;
}

// A pre-multiplied sum is an op made for the call (its scalar in the call's dtype, in
// aligned memory: the scalar is not what this test is about), read now or at the call.
snclResult_t issue(const Call& c, const Placed& p, snclComm_t comm, int rank, std::mt19937_64& local) {
  if (c.op != test::kPreMulSum) return issueOp(c, c.op, p, comm);
  alignas(8) char scalar[8];
  test::storeElement(c.type, scalar, 0, test::preMulScalar(rank));
  snclRedOp_t op;
  const auto residence = local() % 2 ? snclScalarHostImmediate : snclScalarDevice;
  snclResult_t r = snclRedOpCreatePreMulSum(&op, scalar, c.type, residence, comm);
  if (r != snclSuccess) return r;
  r = issueOp(c, op, p, comm);
  const snclResult_t d = snclRedOpDestroy(op, comm);
  return r != snclSuccess ? r : d;
}

// The output against the rank-order reference, the guards, the input out of place; "" or
// what is wrong.
std::string verify(const Call& c, const Placed& p, uint64_t i, int rank, int nranks, uint64_t seed,
                   std::vector<char>& expect, std::vector<char>& tmp) {
  const size_t es = dtypeSize(c.type);
  bool hasOutput = true;
  switch (c.coll) {
    case Coll::AllReduce: reduceRef(seed, i, nranks, c, 0, c.count, &expect, &tmp); break;
    case Coll::Reduce:
      hasOutput = rank == c.root;
      if (hasOutput) reduceRef(seed, i, nranks, c, 0, c.count, &expect, &tmp);
      break;
    case Coll::ReduceScatter: reduceRef(seed, i, nranks, c, size_t(rank) * c.count, c.count, &expect, &tmp); break;
    case Coll::Broadcast:
      expect.resize(p.outBytes);
      fillInput(seed, i, c.root, nranks, c, 0, c.count, expect.data());
      break;
    case Coll::AllGather:
      expect.resize(p.outBytes);
      for (int k = 0; k < nranks; ++k)
        fillInput(seed, i, k, nranks, c, 0, c.count, expect.data() + size_t(k) * c.count * es);
      break;
  }
  const char* got = static_cast<const char*>(p.recv);
  // (memcmp and memcpy get no NULL, not even for 0 bytes: an empty vector's data() may be.)
  if (hasOutput && !expect.empty() && memcmp(got, expect.data(), expect.size()) != 0) {
    size_t at = 0;
    while (at < expect.size() && got[at] == expect[at]) ++at;
    return "wrong bytes from byte " + std::to_string(at) + " of " + std::to_string(expect.size());
  }
  if (!hasOutput && !c.inPlace)
    for (size_t b = 0; b < p.outBytes; ++b)
      if (uint8_t(p.out[b]) != kSentinel) return "wrote a non-root's output";
  // The bytes just before a misaligned output share its first element's aligned word.
  const size_t region = c.inPlace ? std::max(p.inBytes, p.outBytes) : p.outBytes;
  for (size_t b = 0; b < kGuard; ++b)
    if (uint8_t(p.out[-1 - ptrdiff_t(b)]) != kSentinel || uint8_t(p.out[region + b]) != kSentinel)
      return "wrote outside the output";
  if (!c.inPlace && !(c.coll == Coll::Broadcast && rank != c.root)) {
    tmp.resize(p.inBytes);
    fillInput(seed, i, rank, nranks, c, 0, inputCount(c, nranks), tmp.data());
    if (p.inBytes && memcmp(p.in, tmp.data(), p.inBytes) != 0) return "changed the input";
  }
  return "";
}

// Runs every drawn call on comm and checks it and the path it took; returns the failures
// (printed). No Catch2 here: it runs on rank threads and in forked ranks.
int callLoop(snclComm_t comm, int rank, int nranks, uint64_t seed, Mode mode) {
  if (mode == Mode::Planner && comm->cells.transport) {
    fprintf(stderr, "rank %d: the cells path is on despite SNCL_ALGO\n", rank);
    return 1;
  }
  if (mode != Mode::Planner && (!comm->cells.transport || !comm->cells.shared)) {
    fprintf(stderr, "rank %d: the cells or the shared path are off (cells %d, shared %d)\n", rank,
            int(comm->cells.transport != nullptr), int(comm->cells.shared));
    return 1;
  }
  const std::vector<Call> calls = drawCalls(seed, nranks, mode);
  std::mt19937_64 local(seed ^ (uint64_t(rank + 7) << 32));
  Arena arena;
  const std::string err = arena.allocate(mode == Mode::ProcessShared, kArenaBytes);
  if (!err.empty()) {
    fprintf(stderr, "rank %d: %s\n", rank, err.c_str());
    return 1;
  }
  std::vector<char> expect, tmp;
  int failures = 0;
  uint64_t wantCells = 0, wantShared = 0, mayDecline = 0;
  const uint64_t cells0 = comm->cells.calls, shared0 = comm->cells.sharedCalls, declined0 = comm->cells.sharedDeclined;
  for (size_t i = 0; i < calls.size() && failures < 5; ++i) {
    const Call& c = calls[i];
    const Placed p = place(c, i, arena, rank, nranks, seed, local, tmp);
    wantCells += onCells(c, mode);
    wantShared += onShared(c, mode);
    mayDecline += c.large && !onShared(c, mode);
    const snclResult_t r = issue(c, p, comm, rank, local);
    std::string wrong = r == snclSuccess ? verify(c, p, i, rank, nranks, seed, expect, tmp)
                                         : std::string("failed: ") + snclGetLastError(comm);
    if (!wrong.empty()) {
      fprintf(stderr, "rank %d/%d (%s) call %zu %s %s %s count %zu root %d inPlace %d: %s\n", rank, nranks,
              modeName(mode), i, collName(c.coll), dtypeName(c.type), opName(c.op), c.count, c.root,
              int(c.inPlace), wrong.c_str());
      ++failures;
      if (r != snclSuccess) return failures;  // the comm is no longer in step
    }
  }
  const uint64_t cells = comm->cells.calls - cells0, shared = comm->cells.sharedCalls - shared0;
  // Only calls on buffers some rank cannot map may decline the shared path.
  const uint64_t declined = comm->cells.sharedDeclined - declined0;
  if (failures == 0 && (cells != wantCells || shared != wantShared || declined > mayDecline)) {
    fprintf(stderr,
            "rank %d/%d (%s): %llu calls on the cells, %llu on shared buffers, %llu declined; expected %llu, %llu, "
            "at most %llu\n",
            rank, nranks, modeName(mode), (unsigned long long)cells, (unsigned long long)shared,
            (unsigned long long)declined, (unsigned long long)wantCells, (unsigned long long)wantShared,
            (unsigned long long)mayDecline);
    ++failures;
  }
  return failures;
}

int processRank(int rank, int nranks, const snclUniqueId& id, uint64_t seed, Mode mode) {
  snclComm_t comm = nullptr;
  if (snclCommInitRank(&comm, nranks, id, rank) != snclSuccess) {
    fprintf(stderr, "rank %d: init failed: %s\n", rank, snclGetLastError(nullptr));
    return 2;
  }
  int failures = callLoop(comm, rank, nranks, seed, mode);
  if (snclCommDestroy(comm) != snclSuccess) ++failures;
  return failures ? 1 : 0;
}

// The planner's schedules only: one comm forced to "direct", one to "ring,chain".
int plannerRank(int rank, int nranks, const snclUniqueId& id, uint64_t seed) {
  snclComm_t direct = nullptr, pipelined = nullptr;
  if (test::initDirectAndPipelined(nranks, id, rank, &direct, &pipelined) != 0) return 2;
  int failures = callLoop(direct, rank, nranks, seed, Mode::Planner);
  if (failures == 0) failures += callLoop(pipelined, rank, nranks, seed ^ 0x919e, Mode::Planner);
  if (snclCommDestroy(direct) != snclSuccess) ++failures;
  if (snclCommDestroy(pipelined) != snclSuccess) ++failures;
  return failures ? 1 : 0;
}

}  // namespace

TEST_CASE("misaligned: every dtype and op, the planner's schedules (direct, ring and chain)", "[misaligned][process]") {
  testSeed();  // drawn (and printed) before the fork: every rank uses it
  for (int nranks : {2, 4}) {
    INFO("nranks " << nranks);
    const uint64_t seed = testSeed() ^ (0x61a7 + uint64_t(nranks));
    auto exits = test::runRanks(nranks, [&](int rank, int n, const snclUniqueId& id) {
      return plannerRank(rank, n, id, seed);
    }, 300000);
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("misaligned: every dtype and op, heap buffers of process ranks", "[misaligned][process]") {
  testSeed();  // drawn (and printed) before the fork: every rank uses it
  for (int nranks : {2, 3}) {
    INFO("nranks " << nranks);
    const uint64_t seed = testSeed() ^ (0x4ea9 + uint64_t(nranks));
    auto exits = test::runRanks(nranks, [&](int rank, int n, const snclUniqueId& id) {
      return processRank(rank, n, id, seed, Mode::ProcessHeap);
    }, 300000);
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("misaligned: every dtype and op, snclMemAlloc buffers offset by bytes (cells and shared)",
          "[misaligned][process]") {
  testSeed();
  for (int nranks : {2, 4}) {
    INFO("nranks " << nranks);
    const uint64_t seed = testSeed() ^ (0x5aa7 + uint64_t(nranks));
    auto exits = test::runRanks(nranks, [&](int rank, int n, const snclUniqueId& id) {
      return processRank(rank, n, id, seed, Mode::ProcessShared);
    }, 300000);
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("misaligned: every dtype and op, threads of snclCommInitAll (cells and shared)", "[misaligned][threads]") {
  constexpr int n = 4;
  std::vector<snclComm_t> comms(n);
  REQUIRE(snclCommInitAll(comms.data(), n, nullptr) == snclSuccess);
  const uint64_t seed = testSeed() ^ 0x7a11;
  std::vector<int> failures(n, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] { failures[r] = callLoop(comms[r], r, n, seed, Mode::Threads); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) CHECK(failures[r] == 0);
  for (int r = 0; r < n; ++r) CHECK(snclCommDestroy(comms[r]) == snclSuccess);
}

TEST_CASE("misaligned: compressed All-Reduce gives the aligned call's bytes", "[misaligned][threads][compressed]") {
  constexpr int n = 3;
  std::vector<snclComm_t> comms(n);
  REQUIRE(snclCommInitAll(comms.data(), n, nullptr) == snclSuccess);
  const uint64_t seed = testSeed() ^ 0xc0de;
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      std::mt19937_64 g(seed);  // the same draws on every rank
      std::mt19937_64 local(seed ^ uint64_t(r + 1));
      for (int call = 0; call < 24 && errors[r].empty(); ++call) {
        const snclDataType_t type = g() % 2 ? snclFloat32 : snclBfloat16;
        const snclRedOp_t op = g() % 2 ? snclSum : snclAvg;
        const size_t es = dtypeSize(type);
        const size_t count = g() % 3 == 0 ? g() % 300 : 1 + g() % 20000;
        const bool residual = g() % 2, inPlace = g() % 2;
        snclCompressOpts_t opts{};
        opts.size = sizeof(opts);
        opts.kind = g() % 2 ? snclCompressInt8 : snclCompressFp8e4m3;
        opts.blockElems = g() % 2 ? 0 : 1 + g() % 1000;
        Call c;
        c.type = type;
        std::vector<char> input(count * es);
        fillInput(seed, uint64_t(call), r, n, c, 0, count, input.data());
        // Each of the input, output and residual: an aligned copy and one at odd bytes.
        const size_t bytes = count * es + 64;
        std::vector<char> store[2][3];
        char* buf[2][3];
        for (int m = 0; m < 2; ++m)
          for (int k = 0; k < 3; ++k) {
            store[m][k].assign(bytes + 64, 0);
            buf[m][k] = Arena::align64(store[m][k].data()) + (m == 0 ? 0 : misalignment(local, es));
          }
        for (int m = 0; m < 2; ++m) {
          if (count) memcpy(buf[m][0], input.data(), count * es);
          char* out = inPlace ? buf[m][0] : buf[m][1];
          opts.residual = residual ? buf[m][2] : nullptr;
          if (snclAllReduceCompressed(buf[m][0], out, count, type, op, comms[r], nullptr, &opts) != snclSuccess) {
            errors[r] = std::string("call ") + std::to_string(call) + ": " + snclGetLastError(comms[r]);
            return;
          }
        }
        const size_t outSlot = inPlace ? 0 : 1;
        if (memcmp(buf[0][outSlot], buf[1][outSlot], count * es) != 0)
          errors[r] = "call " + std::to_string(call) + ": misaligned output differs, count " + std::to_string(count);
        if (residual && memcmp(buf[0][2], buf[1][2], count * es) != 0)
          errors[r] = "call " + std::to_string(call) + ": misaligned residual differs, count " + std::to_string(count);
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(errors[r] == "");
  }
  for (int r = 0; r < n; ++r) CHECK(snclCommDestroy(comms[r]) == snclSuccess);
}

TEST_CASE("misaligned: every instruction set's kernels at every byte offset give the aligned bytes",
          "[misaligned][kernels]") {
  std::mt19937_64 g(testSeed() ^ 0x6b3e);
  for (ReduceIsa isa : {ReduceIsa::Portable, ReduceIsa::Avx2, ReduceIsa::Avx512}) {
    if (!reduceIsaSupported(isa)) continue;
    INFO("isa " << reduceIsaName(isa));
    for (int t = 0; t < snclNumTypes; ++t) {
      const auto type = snclDataType_t(t);
      const size_t es = dtypeSize(type);
      INFO("type " << dtypeName(type));
      Call c;
      c.type = type;
      // 0..300 elements: every tail length of every vector width, and a few full steps.
      for (int round = 0; round < 8; ++round) {
        const size_t n = g() % 301;
        std::vector<char> a(n * es + 64), b(n * es + 64), want(n * es + 64);
        fillInput(g(), 0, 0, 2, c, 0, n, a.data());
        fillInput(g(), 0, 1, 2, c, 0, n, b.data());
        // Three buffers at their own offsets 1..63 from 64-byte-aligned bases.
        std::vector<char> store[3];
        char* p[3];
        for (int k = 0; k < 3; ++k) {
          store[k].assign(n * es + 192, char(kSentinel));
          p[k] = Arena::align64(store[k].data()) + 1 + g() % 63;
        }
        const auto guardsIntact = [&](int k) {  // nothing written outside p[k]'s n elements
          for (const char* q = store[k].data(); q < store[k].data() + store[k].size(); ++q)
            if ((q < p[k] || q >= p[k] + n * es) && uint8_t(*q) != kSentinel) return false;
          return true;
        };
        for (int o = 0; o < snclNumOps; ++o) {
          const ReduceFn fn = reduceKernel(type, snclRedOp_t(o), isa);
          if (!fn) continue;
          INFO("op " << redOpName(snclRedOp_t(o)) << " count " << n);
          fn(want.data(), a.data(), b.data(), n);
          memcpy(p[1], a.data(), n * es);
          memcpy(p[2], b.data(), n * es);
          fn(p[0], p[1], p[2], n);
          CHECK(memcmp(p[0], want.data(), n * es) == 0);
          fn(p[1], p[1], p[2], n);  // in place (dst == a)
          CHECK(memcmp(p[1], want.data(), n * es) == 0);
          for (int k = 0; k < 3; ++k) CHECK(guardsIntact(k));
        }
        // avg's 1/nranks and divisor; a pre-multiplied sum's factor (integers: no divisor);
        // integers' negation (divisor -1).
        const ScaleFn scale = scaleKernel(type, isa);
        const struct {
          double factor;
          int64_t divisor;
        } scales[] = {{1.0 / 3, 3}, {2.0, 0}, {-1.0, -1}};
        for (const auto& s : scales) {
          INFO("scale " << s.factor << " / " << s.divisor << " count " << n);
          scale(want.data(), a.data(), n, s.factor, s.divisor);
          memcpy(p[1], a.data(), n * es);
          scale(p[0], p[1], n, s.factor, s.divisor);
          CHECK(memcmp(p[0], want.data(), n * es) == 0);
          scale(p[1], p[1], n, s.factor, s.divisor);
          CHECK(memcmp(p[1], want.data(), n * es) == 0);
          for (int k = 0; k < 3; ++k) CHECK(guardsIntact(k));
        }
      }
    }
  }
}
