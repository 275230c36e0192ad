// The bitwise and logical ops (band, bor, bxor, land, lor, lxor) on real ranks: All-Reduce,
// Reduce and Reduce-Scatter with each op on every integer type, random data and random
// counts (zero, odd, prime, several chunks), in place or not, on 3 and 8 processes and on
// both the direct and the pipelined algorithms; compared exactly against a fold computed
// here, with guard elements past every output.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "lib/exec/reduce.h"
#include "sncl/sncl.h"
#include "tests/util/data.h"
#include "tests/util/launcher.h"

using namespace sncl;

namespace {

constexpr snclRedOp_t kOps[] = {snclBand, snclBor, snclBxor, snclLand, snclLor, snclLxor};
constexpr snclDataType_t kTypes[] = {snclInt8, snclUint8, snclInt32, snclUint32, snclInt64, snclUint64};
constexpr size_t kGuard = 16;                 // elements past each output that must stay
constexpr unsigned char kGuardByte = 0xa5;
constexpr const char* kChunkBytes = "1024";  // small counts span several pipeline chunks

enum class Coll { AllReduce, Reduce, ReduceScatter };
const char* collName(Coll c) {
  return c == Coll::AllReduce ? "allreduce" : c == Coll::Reduce ? "reduce" : "reducescatter";
}

uint64_t maskOf(size_t elem) { return elem == 8 ? ~uint64_t(0) : (uint64_t(1) << (8 * elem)) - 1; }

// Input of rank at element i of call `salt`: any bits, but shaped per op so that every
// outcome occurs on 3 and on 8 ranks: denser bits for band, sparser for bor, and zeros at
// a density drawn per element (the same on every rank) for the logical ops, whose
// nonzero values are often a single high bit (a test of the low byte alone misses it).
uint64_t inputOf(snclRedOp_t op, size_t elem, uint64_t salt, int rank, size_t i) {
  const uint64_t h = test::mix64(salt ^ test::mix64((uint64_t(rank) << 48) ^ i)), g = test::mix64(h + 1);
  const uint64_t mask = maskOf(elem);
  if (op == snclBand) return (h | g) & mask;
  if (op == snclBor) return h & g & mask;
  if (op == snclBxor) return h & mask;
  const uint64_t density = test::mix64(salt ^ i ^ 0x10ca1) % 3, z = g & 15;
  if (density == 0 ? z == 0 : density == 1 ? z < 8 : z != 15) return 0;
  return (h & 1) ? uint64_t(1) << (h >> 8) % (8 * elem) : (h & mask) | 1;
}

// The reduction of element i over nranks ranks (nranks >= 2: the logical ops give 1 or 0).
uint64_t expectedOf(snclRedOp_t op, size_t elem, uint64_t salt, int nranks, size_t i) {
  uint64_t acc = inputOf(op, elem, salt, 0, i);
  for (int r = 1; r < nranks; ++r) {
    const uint64_t x = inputOf(op, elem, salt, r, i);
    switch (op) {
      case snclBand: acc &= x; break;
      case snclBor: acc |= x; break;
      case snclBxor: acc ^= x; break;
      case snclLand: acc = acc != 0 && x != 0; break;
      case snclLor: acc = acc != 0 || x != 0; break;
      default: acc = (acc != 0) != (x != 0); break;
    }
  }
  return acc;
}

void store(void* base, size_t elem, size_t i, uint64_t v) { memcpy(static_cast<char*>(base) + i * elem, &v, elem); }
uint64_t load(const void* base, size_t elem, size_t i) {
  uint64_t v = 0;
  memcpy(&v, static_cast<const char*>(base) + i * elem, elem);
  return v;
}

// Zero, odd, prime, or up to a few hundred chunks; the same on every rank (same seed).
size_t drawCount(std::mt19937_64& rng) {
  static const size_t kSmall[] = {0, 1, 2, 3, 7, 13, 31, 127, 257, 1021, 4093};
  switch (rng() % 4) {
    case 0: return kSmall[rng() % std::size(kSmall)];
    case 1: return (rng() % 20000) | 1;
    case 2: return 1 + rng() % 60000;
    default: return rng() % 5000;
  }
}

struct Runner {
  snclComm_t comm;
  int rank, nranks;
  const char* label;
  int failures = 0;

  void fail(Coll c, snclDataType_t type, snclRedOp_t op, size_t count, bool inPlace, const std::string& why) {
    fprintf(stderr, "[%s] rank %d/%d %s %s %s count %zu%s: %s\n", label, rank, nranks, collName(c), dtypeName(type),
            redOpName(op), count, inPlace ? " in place" : "", why.c_str());
    ++failures;
  }

  // One call; count is the collective's count argument (Reduce-Scatter: per rank).
  void run(Coll c, snclDataType_t type, snclRedOp_t op, size_t count, bool inPlace, int root, uint64_t salt) {
    const size_t elem = dtypeSize(type), n = size_t(nranks);
    const size_t inCount = c == Coll::ReduceScatter ? count * n : count;
    // One buffer: the input, then guard elements (in place, the output is inside it).
    std::vector<unsigned char> in((inCount + kGuard) * elem, kGuardByte), out((count + kGuard) * elem, kGuardByte);
    for (size_t i = 0; i < inCount; ++i) store(in.data(), elem, i, inputOf(op, elem, salt, rank, i));
    const size_t outFirst = c == Coll::ReduceScatter ? size_t(rank) * count : 0;  // element of the reduction
    unsigned char* recv = inPlace ? in.data() + outFirst * elem : out.data();
    snclResult_t r;
    if (c == Coll::AllReduce) r = snclAllReduce(in.data(), recv, count, type, op, comm, nullptr);
    else if (c == Coll::Reduce) r = snclReduce(in.data(), recv, count, type, op, root, comm, nullptr);
    else r = snclReduceScatter(in.data(), recv, count, type, op, comm, nullptr);
    if (r != snclSuccess) return fail(c, type, op, count, inPlace, snclGetLastError(comm));
    const bool hasResult = c != Coll::Reduce || rank == root;
    for (size_t i = 0; hasResult && i < count; ++i) {
      const uint64_t got = load(recv, elem, i), want = expectedOf(op, elem, salt, nranks, outFirst + i);
      if (got != want) {
        char why[120];
        snprintf(why, sizeof why, "element %zu: got 0x%llx, want 0x%llx", i, static_cast<unsigned long long>(got),
                 static_cast<unsigned long long>(want));
        return fail(c, type, op, count, inPlace, why);
      }
    }
    // Guards intact; out of place, the input unchanged and (Reduce off the root) the
    // output untouched.
    auto intact = [&](const std::vector<unsigned char>& b, size_t from) {
      for (size_t k = from; k < b.size(); ++k)
        if (b[k] != kGuardByte) return false;
      return true;
    };
    if (!intact(in, inCount * elem) || !intact(out, hasResult && !inPlace ? count * elem : 0))
      return fail(c, type, op, count, inPlace, "wrote past the output, or off the root");
    for (size_t i = 0; !inPlace && i < inCount; ++i)
      if (load(in.data(), elem, i) != inputOf(op, elem, salt, rank, i)) return fail(c, type, op, count, inPlace, "input changed");
  }

  // Every collective, type and op at a random count each, in place or not at random.
  void matrix(uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (snclDataType_t type : kTypes)
      for (snclRedOp_t op : kOps)
        for (Coll c : {Coll::AllReduce, Coll::Reduce, Coll::ReduceScatter}) {
          const size_t count = drawCount(rng) / (c == Coll::ReduceScatter ? size_t(nranks) : 1);
          const bool inPlace = rng() % 2;
          const int root = int(rng() % uint64_t(nranks));
          run(c, type, op, count, inPlace, root, rng());
        }
  }
};

}  // namespace

TEST_CASE("bitwise and logical ops are exact across processes", "[collectives][process][bitwise]") {
  // The seed is printed, so that a failure can be replayed with SNCL_TEST_SEED.
  const char* fixed = std::getenv("SNCL_TEST_SEED");
  const uint64_t seed = fixed ? strtoull(fixed, nullptr, 0) : std::random_device{}();
  for (int nranks : {3, 8}) {
    INFO("nranks " << nranks << " seed " << seed << " (SNCL_TEST_SEED)");
    auto exits = test::runRanks(nranks, [seed](int rank, int n, const snclUniqueId& id) {
      setenv("SNCL_CHUNK_SIZE", kChunkBytes, 1);
      snclComm_t direct = nullptr, pipelined = nullptr;
      if (test::initDirectAndPipelined(n, id, rank, &direct, &pipelined)) return 2;
      Runner d{direct, rank, n, "direct"}, p{pipelined, rank, n, "ring/chain"};
      d.matrix(seed * 2 + uint64_t(n));
      p.matrix(seed * 2 + uint64_t(n) + 1000);
      int failures = d.failures + p.failures;
      if (snclCommDestroy(direct) != snclSuccess || snclCommDestroy(pipelined) != snclSuccess) ++failures;
      return failures ? 1 : 0;
    }, 600000);
    CHECK(test::allSucceeded(exits));
  }
  CHECK(test::countShmSegments() == 0);
}
