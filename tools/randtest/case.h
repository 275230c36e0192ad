// sncl-randtest's cases: what one case runs, how a seed generates a sequence of them, the
// one-line spec that replays a case, and the simpler variants the shrinker tries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sncl/sncl.h"

namespace randtest {

enum class Coll { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AlltoAll, Gather, Scatter, SendRecv, kCount };
constexpr int kPreMulSum = snclNumOps;  // op index of a pre-multiplied sum
constexpr int kNoOp = -1;
constexpr int kMaxRanks = 8;

bool isReduction(Coll c);
bool hasRoot(Coll c);
const char* collName(Coll c);
const char* typeName(snclDataType_t t);
const char* opName(int op);
size_t elemSize(snclDataType_t t);

// One message of a send/receive call. src and dst are taken modulo the comm's size, so a
// call fits any comm (a split's comms differ in size).
struct Msg {
  int src = 0, dst = 0;
  size_t count = 0;
};

struct Call {
  Coll coll = Coll::AllReduce;
  snclDataType_t type = snclFloat32;
  int op = kNoOp;     // snclRedOp_t, kPreMulSum, or kNoOp for collectives that only move data
  int root = 0;       // modulo the comm's size
  size_t count = 0;   // the collective's count argument
  bool inPlace = false;
  int offset = 0;     // buffers start this many elements past an aligned address
  std::vector<Msg> msgs;  // SendRecv only
};

// Settings of the session (one world comm) that a case runs in.
struct World {
  int nranks = 2;
  std::string algo;           // SNCL_ALGO, empty: the planner's choice
  size_t chunk = 0;           // SNCL_CHUNK_SIZE, 0: default
  std::vector<int> hosts;     // virtual host per rank (SNCL_HOSTID) for --transport mixed
};

struct Case {
  World world;
  uint64_t seed = 0;          // data values, scalars and each rank's posting order
  bool group = false;         // all calls in one snclGroupStart/End
  bool stream = false;        // calls queued on an snclStream, synchronized after the last
  std::vector<int> colors, keys;  // snclCommSplit arguments per world rank; empty: no split
  std::vector<Call> calls;
};

struct GenOptions {
  size_t maxBytes = 32u << 20;  // largest buffer of one rank in one call
  int ranks = 0;                // 0: random 2..8
  bool hosts = false;           // draw virtual hosts (mixed transport)
};

// Session s of a run with this seed: its world and its cases. Deterministic in (seed, s).
struct Session {
  World world;
  std::vector<Case> cases;
  uint64_t firstIndex = 0;  // global number of its first case
};
Session makeSession(uint64_t seed, uint64_t s, uint64_t firstIndex, const GenOptions& opt);

// The one-line spec (`n=4 seed=... c=allreduce.f32.sum.r0.n100.ip0.o0 ...`) and back.
std::string formatCase(const Case& c);
bool parseCase(const std::string& spec, Case* out, std::string* error);

// The largest buffer (bytes) one rank uses for the call on a comm of nranks.
size_t callBytes(const Call& call, int nranks);
// Variants of a failing case that are simpler in one respect, most promising first.
std::vector<Case> shrinkCandidates(const Case& c);

// A small, fast, seedable generator (splitmix64), the same on every rank.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next();
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
  int range(int lo, int hi) { return lo + static_cast<int>(below(static_cast<uint64_t>(hi - lo + 1))); }
  bool chance(double p) { return static_cast<double>(next() >> 11) * 0x1.0p-53 < p; }
};
uint64_t mix(uint64_t a, uint64_t b);

}  // namespace randtest
