// A seeded sequence of All-Reduce, All-Gather, Broadcast and Reduce-Scatter calls of random
// sizes and types whose results are checked exactly: the loop of the chaos soak and of the
// rail-failover test. Public API only, header only.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "sncl/sncl.h"

namespace sncl::exact {

enum Coll { kAllReduce, kAllGather, kBroadcast, kReduceScatter, kNumColls };
inline const char* collName(Coll c) {
  static const char* names[] = {"allreduce", "allgather", "broadcast", "reducescatter"};
  return names[c];
}

struct Call {
  Coll coll;
  snclDataType_t type;
  size_t count;  // per rank (All-Gather, Reduce-Scatter) or in all
  int root;
};

inline size_t elemSize(snclDataType_t t) { return t == snclInt8 ? 1 : 4; }

// The same sequence on every rank: a size log-uniform over [1 B, maxBytes], zero once in
// zeroEvery calls.
inline Call drawCall(std::mt19937_64& rng, int nranks, size_t maxBytes, unsigned zeroEvery) {
  Call c;
  c.coll = static_cast<Coll>(rng() % kNumColls);
  const snclDataType_t types[] = {snclInt8, snclInt32, snclFloat32};
  c.type = types[rng() % 3];
  const double logMax = std::log(double(maxBytes < 2 ? 2 : maxBytes));
  size_t bytes = static_cast<size_t>(std::exp(std::uniform_real_distribution<double>(0, logMax)(rng)));
  if (rng() % zeroEvery == 0) bytes = 0;
  c.count = bytes / elemSize(c.type);
  if (c.coll == kAllGather || c.coll == kReduceScatter) c.count /= size_t(nranks);
  c.root = int(rng() % uint64_t(nranks));
  return c;
}

// Small integers: every sum over up to 8 ranks is exact in int8, int32 and float32.
inline int valueOf(int rank, int call, size_t i) {
  return int((uint64_t(rank) * 7 + i * 13 + uint64_t(call) * 5) % 15);
}

inline void store(snclDataType_t t, void* base, size_t i, int v) {
  if (t == snclInt8) static_cast<int8_t*>(base)[i] = int8_t(v);
  else if (t == snclInt32) static_cast<int32_t*>(base)[i] = v;
  else static_cast<float*>(base)[i] = float(v);
}

inline int load(snclDataType_t t, const void* base, size_t i) {
  if (t == snclInt8) return static_cast<const int8_t*>(base)[i];
  if (t == snclInt32) return static_cast<const int32_t*>(base)[i];
  return int(static_cast<const float*>(base)[i]);
}

inline int sumOver(int nranks, int call, size_t i) {
  int s = 0;
  for (int r = 0; r < nranks; ++r) s += valueOf(r, call, i);
  return s;
}

// Runs call number index (blocking) and returns its wrong elements, or -1 when it failed.
// in holds inCount and out outCount elements of the largest call; *bytes grows by the
// bytes the rank received.
inline long runCall(snclComm_t comm, int rank, int nranks, int index, const Call& c, std::vector<char>& in,
                    std::vector<char>& out, double* bytes) {
  const size_t inCount = c.coll == kReduceScatter ? c.count * nranks : c.count;
  const size_t outCount = c.coll == kAllGather ? c.count * nranks : c.count;
  for (size_t i = 0; i < inCount; ++i) store(c.type, in.data(), i, valueOf(rank, index, i));
  memset(out.data(), 0x5a, outCount * elemSize(c.type));
  snclResult_t r = snclSuccess;
  switch (c.coll) {
    case kAllReduce: r = snclAllReduce(in.data(), out.data(), c.count, c.type, snclSum, comm, nullptr); break;
    case kAllGather: r = snclAllGather(in.data(), out.data(), c.count, c.type, comm, nullptr); break;
    case kBroadcast: r = snclBroadcast(in.data(), out.data(), c.count, c.type, c.root, comm, nullptr); break;
    case kReduceScatter: r = snclReduceScatter(in.data(), out.data(), c.count, c.type, snclSum, comm, nullptr); break;
    default: break;
  }
  if (r != snclSuccess) return -1;
  if (bytes) *bytes += double(outCount * elemSize(c.type));
  long wrong = 0;
  for (size_t i = 0; i < outCount; ++i) {
    int expect = 0;
    switch (c.coll) {
      case kAllReduce: expect = sumOver(nranks, index, i); break;
      case kAllGather: expect = valueOf(int(i / c.count), index, i % c.count); break;
      case kBroadcast: expect = valueOf(c.root, index, i); break;
      case kReduceScatter: expect = sumOver(nranks, index, size_t(rank) * c.count + i); break;
      default: break;
    }
    wrong += load(c.type, out.data(), i) != expect;
  }
  return wrong;
}

}  // namespace sncl::exact
