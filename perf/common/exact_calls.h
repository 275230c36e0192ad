// A seeded sequence of All-Reduce, All-Gather, Broadcast and Reduce-Scatter calls and
// groups of sends and receives, of random sizes and types, whose results are checked
// exactly: the loop of the chaos soak and of the rail-failover test. Public API only,
// header only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "sncl/sncl.h"

namespace sncl::exact {

enum Coll { kAllReduce, kAllGather, kBroadcast, kReduceScatter, kSendRecv, kNumColls };
inline const char* collName(Coll c) {
  static const char* names[] = {"allreduce", "allgather", "broadcast", "reducescatter", "sendrecv"};
  return names[c];
}

struct Call {
  Coll coll;
  snclDataType_t type;
  size_t count;  // per rank (All-Gather, Reduce-Scatter) or in all; SendRecv: the first message
  int root;
  // SendRecv: rank r sends count elements to r+shift[0] and count/2 to r+shift[1] (mod
  // nranks) and receives both of its own from r-shift[0], r-shift[1], in one group whose
  // order of posting each rank draws itself (from order).
  int shift[2];
  uint64_t order;
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
  c.shift[0] = 1 + int(rng() % uint64_t(nranks - 1));
  c.shift[1] = 1 + int(rng() % uint64_t(nranks - 1));
  c.order = rng();
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

// The SendRecv group of call c on rank: two sends and two receives, posted in an order of
// its own; two messages on one pair stay in order (they match in posting order, as NCCL's).
inline snclResult_t sendRecvGroup(snclComm_t comm, int rank, int nranks, const Call& c, const std::vector<char>& in,
                                  std::vector<char>& out) {
  const size_t counts[2] = {c.count, c.count / 2};
  int slots[4] = {0, 1, 2, 3};  // sends 0, 1, receives 2, 3
  std::mt19937_64 rng(c.order ^ (uint64_t(rank) * 0x9e3779b97f4a7c15ull));
  std::shuffle(slots, slots + 4, rng);
  if (c.shift[0] == c.shift[1])
    for (int kind = 0; kind < 2; ++kind) {  // the first message of the pair goes first
      int* a = std::find(slots, slots + 4, 2 * kind);
      int* b = std::find(slots, slots + 4, 2 * kind + 1);
      if (b < a) std::swap(*a, *b);
    }
  snclResult_t r = snclGroupStart();
  for (int k = 0; k < 4 && r == snclSuccess; ++k) {
    const int m = slots[k] % 2;
    if (slots[k] < 2)
      r = snclSend(in.data(), counts[m], c.type, (rank + c.shift[m]) % nranks, comm, nullptr);
    else
      r = snclRecv(out.data() + (m ? counts[0] * elemSize(c.type) : 0), counts[m], c.type,
                   (rank - c.shift[m] + nranks) % nranks, comm, nullptr);
  }
  const snclResult_t end = snclGroupEnd();
  return r != snclSuccess ? r : end;
}

// Runs call number index (blocking) and returns its wrong elements, or -1 when it failed.
// in holds inCount and out outCount elements of the largest call; *bytes grows by the
// bytes the rank received.
inline long runCall(snclComm_t comm, int rank, int nranks, int index, const Call& c, std::vector<char>& in,
                    std::vector<char>& out, double* bytes) {
  const size_t inCount = c.coll == kReduceScatter ? c.count * nranks : c.count;
  const size_t outCount = c.coll == kAllGather ? c.count * nranks : c.coll == kSendRecv ? c.count + c.count / 2 : c.count;
  for (size_t i = 0; i < inCount; ++i) store(c.type, in.data(), i, valueOf(rank, index, i));
  memset(out.data(), 0x5a, outCount * elemSize(c.type));
  snclResult_t r = snclSuccess;
  switch (c.coll) {
    case kAllReduce: r = snclAllReduce(in.data(), out.data(), c.count, c.type, snclSum, comm, nullptr); break;
    case kAllGather: r = snclAllGather(in.data(), out.data(), c.count, c.type, comm, nullptr); break;
    case kBroadcast: r = snclBroadcast(in.data(), out.data(), c.count, c.type, c.root, comm, nullptr); break;
    case kReduceScatter: r = snclReduceScatter(in.data(), out.data(), c.count, c.type, snclSum, comm, nullptr); break;
    case kSendRecv: r = sendRecvGroup(comm, rank, nranks, c, in, out); break;
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
      case kSendRecv: {
        const int m = i < c.count ? 0 : 1;
        expect = valueOf((rank - c.shift[m] + nranks) % nranks, index, m ? i - c.count : i);
        break;
      }
      default: break;
    }
    wrong += load(c.type, out.data(), i) != expect;
  }
  return wrong;
}

}  // namespace sncl::exact
