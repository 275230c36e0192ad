// The random test of the MPI drop-in: sncl-randtest's case generator (tools/randtest/case.*)
// drives a sequence of MPI collective calls, and each result is compared with MPI's own,
// computed in the same process by the PMPI_* entry points (which the preloaded
// libsncl_mpi.so does not intercept) on copies of the same inputs.
//
// A generated call becomes the MPI call nearest to it: all-reduce, reduce, broadcast,
// all-gather, reduce-scatter (MPI_Reduce_scatter_block), all-to-all, gather, scatter; and a
// send/receive call becomes MPI_Barrier. The
// types sncl and MPI share map directly (with random aliases: MPI_INT or MPI_INT32_T, ...);
// float16/bfloat16 reductions become MPI_SHORT/MPI_INT16_T/MPI_UINT16_T (a callback reduction),
// float8 ones 8-bit integers; avg becomes MPI_SUM and pre-multiplied sums bitwise ops on
// integers (served on the widths sncl has) or MPI_SUM on floats. A few data movements use
// a contiguous derived type (served as bytes). Cases with a split run on MPI_Comm_split's
// communicators.
//
// One call in three runs in its nonblocking form (MPI_I*, then MPI_Wait), and one data
// movement or reduce-scatter in three in its v-form with equal counts (MPI_Allgatherv,
// MPI_Reduce_scatter, ...), whose layouts, in place too, are the fixed-count ones.
//
// The reference is always the out-of-place form, so a run without the preload checks the
// program's in-place layouts against MPI itself. Integers take any bit pattern and wrap
// (8- and 16-bit sums excepted, see fill); floats are small integers (sums exact in any
// order), +-2^k and rare zeros for products, and small integers or infinities for max/min:
// every result is exact, compared by bytes.
//
// Each rank prints, at the end, the calls it expects the drop-in to serve and pass through
// per kind, in the drop-in's SNCL_MPI_DEBUG=1 format, so a script can check it served them.
#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "tools/randtest/case.h"

namespace {

using randtest::Call;
using randtest::Coll;

enum Kind { kAllreduce, kBcast, kReduce, kAllgather, kReduceScatterBlock, kAlltoall, kBarrier, kGather, kScatter, kNumKinds };
// The drop-in's names for the kinds, as SNCL_MPI_DEBUG prints them.
constexpr const char* kNames[kNumKinds] = {"MPI_Allreduce", "MPI_Bcast",    "MPI_Reduce",  "MPI_Allgather",
                                           "MPI_Reduce_scatter_block", "MPI_Alltoall", "MPI_Barrier",
                                           "MPI_Gather",    "MPI_Scatter"};

// How a buffer's elements are filled.
enum class Values { Bits, Float, Double };

struct Type {
  MPI_Datatype t;
  const char* name;
  size_t elem;
  Values values;
  bool snclType;  // a reduction type the drop-in serves
  bool derived;   // made here, freed after the call
};

struct Op {
  MPI_Op op;
  const char* name;
  bool snclOp;
};

// One MPI call, derived from a generated call. Same on every rank (only seeds decide).
struct MpiCall {
  Kind kind;
  Type type;
  Op op{MPI_SUM, "-", true};
  int root = 0;
  int count = 0;
  bool inPlace = false;
  int offset = 0;
  bool nonblocking = false;  // the MPI_I* form, completed by MPI_Wait
  bool vform = false;        // the v-form with equal counts (Allgatherv, Reduce_scatter, ...)
  bool predictSncl = false;  // the drop-in serves it (when the drop-in is loaded)
};

uint64_t bitsAt(uint64_t base, size_t i) {  // splitmix64 finalizer of a counter
  uint64_t z = base + (i + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <size_t N>
const Type& pick(const Type (&v)[N], uint64_t h) {
  return v[h % N];
}

Type reductionType(snclDataType_t t, uint64_t h) {
  static const Type i8[] = {{MPI_INT8_T, "MPI_INT8_T", 1, Values::Bits, true, false},
                            {MPI_SIGNED_CHAR, "MPI_SIGNED_CHAR", 1, Values::Bits, true, false}};
  static const Type u8[] = {{MPI_UINT8_T, "MPI_UINT8_T", 1, Values::Bits, true, false},
                            {MPI_UNSIGNED_CHAR, "MPI_UNSIGNED_CHAR", 1, Values::Bits, true, false}};
  static const Type i32[] = {{MPI_INT32_T, "MPI_INT32_T", 4, Values::Bits, true, false},
                             {MPI_INT, "MPI_INT", 4, Values::Bits, true, false}};
  static const Type u32[] = {{MPI_UINT32_T, "MPI_UINT32_T", 4, Values::Bits, true, false},
                             {MPI_UNSIGNED, "MPI_UNSIGNED", 4, Values::Bits, true, false}};
  static const Type i64[] = {{MPI_INT64_T, "MPI_INT64_T", 8, Values::Bits, true, false},
                             {MPI_LONG_LONG, "MPI_LONG_LONG", 8, Values::Bits, true, false},
                             {MPI_LONG, "MPI_LONG", sizeof(long), Values::Bits, true, false}};
  static const Type u64[] = {{MPI_UINT64_T, "MPI_UINT64_T", 8, Values::Bits, true, false},
                             {MPI_UNSIGNED_LONG_LONG, "MPI_UNSIGNED_LONG_LONG", 8, Values::Bits, true, false},
                             {MPI_UNSIGNED_LONG, "MPI_UNSIGNED_LONG", sizeof(long), Values::Bits, true, false}};
  // 16-bit integers: sncl has none, so these reductions must pass through.
  static const Type i16[] = {{MPI_SHORT, "MPI_SHORT", 2, Values::Bits, false, false},
                             {MPI_INT16_T, "MPI_INT16_T", 2, Values::Bits, false, false},
                             {MPI_UINT16_T, "MPI_UINT16_T", 2, Values::Bits, false, false}};
  switch (t) {
    case snclInt8: case snclFloat8e4m3: return pick(i8, h);
    case snclUint8: case snclFloat8e5m2: return pick(u8, h);
    case snclInt32: return pick(i32, h);
    case snclUint32: return pick(u32, h);
    case snclInt64: return pick(i64, h);
    case snclUint64: return pick(u64, h);
    case snclFloat32: return {MPI_FLOAT, "MPI_FLOAT", 4, Values::Float, true, false};
    case snclFloat64: return {MPI_DOUBLE, "MPI_DOUBLE", 8, Values::Double, true, false};
    default: return pick(i16, h);  // float16, bfloat16
  }
}

// Data movement: any predefined type of the element's size moves as bytes; one call in
// eight uses a contiguous derived type instead, which the drop-in moves as bytes too.
Type movementType(snclDataType_t t, uint64_t h) {
  static const Type b1[] = {{MPI_BYTE, "MPI_BYTE", 1, Values::Bits, false, false},
                            {MPI_CHAR, "MPI_CHAR", 1, Values::Bits, false, false},
                            {MPI_UINT8_T, "MPI_UINT8_T", 1, Values::Bits, false, false}};
  static const Type b2[] = {{MPI_SHORT, "MPI_SHORT", 2, Values::Bits, false, false},
                            {MPI_UINT16_T, "MPI_UINT16_T", 2, Values::Bits, false, false}};
  static const Type b4[] = {{MPI_FLOAT, "MPI_FLOAT", 4, Values::Bits, false, false},
                            {MPI_INT, "MPI_INT", 4, Values::Bits, false, false}};
  static const Type b8[] = {{MPI_DOUBLE, "MPI_DOUBLE", 8, Values::Bits, false, false},
                            {MPI_INT64_T, "MPI_INT64_T", 8, Values::Bits, false, false},
                            {MPI_UNSIGNED_LONG_LONG, "MPI_UNSIGNED_LONG_LONG", 8, Values::Bits, false, false}};
  const size_t elem = randtest::elemSize(t);
  if (h % 8 == 0) {
    MPI_Datatype d;
    MPI_Type_contiguous(static_cast<int>(elem), MPI_BYTE, &d);
    MPI_Type_commit(&d);
    return {d, "contiguous", elem, Values::Bits, false, true};
  }
  h /= 8;
  switch (elem) {
    case 1: return pick(b1, h);
    case 2: return pick(b2, h);
    case 4: return pick(b4, h);
    default: return pick(b8, h);
  }
}

Op mpiOp(int op, const Type& type, uint64_t h) {
  // sncl serves them on the integer types it has (not on 16-bit ones: snclType decides).
  static const Op bitwise[] = {{MPI_BAND, "MPI_BAND", true}, {MPI_BOR, "MPI_BOR", true}, {MPI_BXOR, "MPI_BXOR", true}};
  switch (op) {
    case snclSum: return {MPI_SUM, "MPI_SUM", true};
    case snclProd: return {MPI_PROD, "MPI_PROD", true};
    case snclMax: return {MPI_MAX, "MPI_MAX", true};
    case snclMin: return {MPI_MIN, "MPI_MIN", true};
    case snclAvg: return {MPI_SUM, "MPI_SUM", true};  // MPI has no average
    default:  // pre-multiplied sum: MPI has none either; bitwise ops are only defined on integers
      return type.values == Values::Bits ? bitwise[h % 3] : Op{MPI_SUM, "MPI_SUM", true};
  }
}

MpiCall translate(const Call& call, uint64_t h) {
  MpiCall m;
  static const Kind kinds[] = {kAllreduce, kBcast, kReduce, kAllgather, kReduceScatterBlock,
                               kAlltoall, kGather, kScatter, kBarrier};
  m.kind = kinds[static_cast<int>(call.coll)];
  const bool reduction = randtest::isReduction(call.coll);
  m.type = reduction ? reductionType(call.type, h) : movementType(call.type, h);
  if (reduction) m.op = mpiOp(call.op, m.type, h >> 8);
  m.root = call.root;
  m.count = static_cast<int>(call.count);
  m.inPlace = call.inPlace && m.kind != kBcast;
  m.offset = call.offset;
  m.nonblocking = (h >> 40) % 3 == 0;
  m.vform = (m.kind == kAllgather || m.kind == kAlltoall || m.kind == kGather || m.kind == kScatter ||
             m.kind == kReduceScatterBlock) &&
            (h >> 44) % 3 == 0;
  // Every call is served: counts of 0 (nothing to move on any rank), derived types (as
  // bytes), and reductions sncl lacks the type for (16-bit integers: a callback reduction,
  // whose 64 MiB limit on all ranks' inputs --max-bytes keeps clear of).
  m.predictSncl = true;
  return m;
}

// Values of elements [0, n) of a buffer with seed base, for op (floats: exact results).
void fill(unsigned char* p, size_t n, const Type& type, MPI_Op op, uint64_t base) {
  for (size_t i = 0; i < n; ++i) {
    const uint64_t h = bitsAt(base, i);
    if (type.values == Values::Bits) {
      // 8- and 16-bit sums must not overflow: Open MPI's AVX reductions saturate them
      // (open-mpi/ompi#8045) where sncl wraps. 0..15 on 8 ranks fits either signedness.
      uint64_t v = op == MPI_SUM && type.elem <= 2 ? (h >> 8) % 16 : h;
      // Open MPI 4.1.4 compares MPI_UNSIGNED_LONG as signed in max/min
      // (open-mpi/ompi#10525): keep the top bit clear there, so both readings agree.
      if (type.t == MPI_UNSIGNED_LONG && (op == MPI_MAX || op == MPI_MIN)) v >>= 1;
      std::memcpy(p + i * type.elem, &v, type.elem);
      continue;
    }
    double v;
    if (op == MPI_PROD) {  // +-2^k, |k| <= 1: a product of 8 is exact; zeros rarely
      static const double pw[] = {0.5, 1, 2};
      v = h % 64 == 0 ? 0.0 : pw[(h >> 8) % 3] * ((h >> 16) & 1 ? -1 : 1);
    } else if (op != MPI_SUM && h % 97 == 0) {  // max/min: infinities too
      v = (h >> 8) & 1 ? HUGE_VAL : -HUGE_VAL;
    } else {
      v = static_cast<double>(static_cast<int>((h >> 8) % 2001) - 1000);  // never -0
    }
    if (type.values == Values::Float) {
      const float f = static_cast<float>(v);
      std::memcpy(p + i * 4, &f, 4);
    } else {
      std::memcpy(p + i * 8, &v, 8);
    }
  }
}

// A buffer of n elements starting offset elements past a 64-byte boundary, with 64 guard
// bytes on each side.
constexpr size_t kGuard = 64;
struct Buf {
  std::vector<unsigned char> mem;
  size_t start = 0, bytes = 0;
  Buf(size_t n, size_t elem, int offset) : bytes(n * elem) {
    start = kGuard + static_cast<size_t>(offset) * elem;
    mem.resize(start + bytes + kGuard + 64);
    const size_t shift = (64 - reinterpret_cast<uintptr_t>(mem.data()) % 64) % 64;
    start += shift;
    for (size_t i = 0; i < mem.size(); ++i) mem[i] = static_cast<unsigned char>(0xa5 ^ i);
  }
  unsigned char* p() { return mem.data() + start; }
  bool guardsOk() const {
    for (size_t i = start - kGuard; i < start; ++i)
      if (mem[i] != static_cast<unsigned char>(0xa5 ^ i)) return false;
    for (size_t i = start + bytes; i < start + bytes + kGuard; ++i)
      if (mem[i] != static_cast<unsigned char>(0xa5 ^ i)) return false;
    return true;
  }
};

// The drop-in's name of a call, as SNCL_MPI_DEBUG prints it ("MPI_Iallgatherv").
std::string nameOf(const MpiCall& c) {
  const char* base = kNames[c.kind] + 4;  // without "MPI_"
  if (c.vform && c.kind == kReduceScatterBlock) base = "Reduce_scatter";
  const char* v = c.vform && c.kind != kReduceScatterBlock ? "v" : "";
  char s[64];
  if (c.nonblocking)
    std::snprintf(s, sizeof s, "MPI_I%c%s%s", base[0] - 'A' + 'a', base + 1, v);
  else
    std::snprintf(s, sizeof s, "MPI_%s%s", base, v);
  return s;
}

// The interposed v-form or nonblocking form of c (the reference never takes these).
int invokeForm(const MpiCall& c, const void* sb, void* rb, MPI_Comm comm) {
  const MPI_Datatype t = c.type.t;
  const int n = c.count;
  const bool ipSend = sb == MPI_IN_PLACE;
  int ranks = 1;
  MPI_Comm_size(comm, &ranks);
  std::vector<int> counts(static_cast<size_t>(ranks), n), displs(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) displs[static_cast<size_t>(r)] = r * n;
  const int* cs = counts.data();
  const int* ds = displs.data();
  const MPI_Datatype st = ipSend ? MPI_DATATYPE_NULL : t;
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Request* q = c.nonblocking ? &req : nullptr;
  int rc = MPI_ERR_OTHER;
  if (c.vform) {
    switch (c.kind) {
      case kAllgather:
        rc = q ? MPI_Iallgatherv(sb, ipSend ? 0 : n, st, rb, cs, ds, t, comm, q)
               : MPI_Allgatherv(sb, ipSend ? 0 : n, st, rb, cs, ds, t, comm);
        break;
      case kAlltoall:
        rc = q ? MPI_Ialltoallv(sb, cs, ds, st, rb, cs, ds, t, comm, q)
               : MPI_Alltoallv(sb, cs, ds, st, rb, cs, ds, t, comm);
        break;
      case kGather:
        rc = q ? MPI_Igatherv(sb, n, t, rb, cs, ds, t, c.root, comm, q)
               : MPI_Gatherv(sb, n, t, rb, cs, ds, t, c.root, comm);
        break;
      case kScatter:
        rc = q ? MPI_Iscatterv(sb, cs, ds, t, rb, n, t, c.root, comm, q)
               : MPI_Scatterv(sb, cs, ds, t, rb, n, t, c.root, comm);
        break;
      default:
        rc = q ? MPI_Ireduce_scatter(sb, rb, cs, t, c.op.op, comm, q)
               : MPI_Reduce_scatter(sb, rb, cs, t, c.op.op, comm);
        break;
    }
  } else {
    switch (c.kind) {
      case kAllreduce: rc = MPI_Iallreduce(sb, rb, n, t, c.op.op, comm, q); break;
      case kReduce: rc = MPI_Ireduce(sb, rb, n, t, c.op.op, c.root, comm, q); break;
      case kBcast: rc = MPI_Ibcast(rb, n, t, c.root, comm, q); break;
      case kAllgather: rc = MPI_Iallgather(sb, ipSend ? 0 : n, st, rb, n, t, comm, q); break;
      case kAlltoall: rc = MPI_Ialltoall(sb, ipSend ? 0 : n, st, rb, n, t, comm, q); break;
      case kReduceScatterBlock: rc = MPI_Ireduce_scatter_block(sb, rb, n, t, c.op.op, comm, q); break;
      case kGather: rc = MPI_Igather(sb, n, t, rb, n, t, c.root, comm, q); break;
      case kScatter: rc = MPI_Iscatter(sb, n, t, rb, n, t, c.root, comm, q); break;
      default: rc = MPI_Ibarrier(comm, q); break;
    }
  }
  if (rc == MPI_SUCCESS && q) rc = MPI_Wait(q, MPI_STATUS_IGNORE);
  return rc;
}

// Calls the interposed entry point (MPI_*) or MPI's own (PMPI_*).
int invoke(bool ref, const MpiCall& c, const void* sb, void* rb, MPI_Comm comm) {
  if (!ref && (c.vform || c.nonblocking)) return invokeForm(c, sb, rb, comm);
  const MPI_Datatype t = c.type.t;
  const int n = c.count;
  const bool ipSend = sb == MPI_IN_PLACE;
  switch (c.kind) {
    case kAllreduce: return (ref ? PMPI_Allreduce : MPI_Allreduce)(sb, rb, n, t, c.op.op, comm);
    case kReduce: return (ref ? PMPI_Reduce : MPI_Reduce)(sb, rb, n, t, c.op.op, c.root, comm);
    case kBcast: return (ref ? PMPI_Bcast : MPI_Bcast)(rb, n, t, c.root, comm);
    case kAllgather:
      return (ref ? PMPI_Allgather : MPI_Allgather)(sb, ipSend ? 0 : n, ipSend ? MPI_DATATYPE_NULL : t, rb, n, t, comm);
    case kAlltoall:
      return (ref ? PMPI_Alltoall : MPI_Alltoall)(sb, ipSend ? 0 : n, ipSend ? MPI_DATATYPE_NULL : t, rb, n, t, comm);
    case kReduceScatterBlock:
      return (ref ? PMPI_Reduce_scatter_block : MPI_Reduce_scatter_block)(sb, rb, n, t, c.op.op, comm);
    case kGather: return (ref ? PMPI_Gather : MPI_Gather)(sb, n, t, rb, n, t, c.root, comm);
    case kScatter: return (ref ? PMPI_Scatter : MPI_Scatter)(sb, n, t, rb, n, t, c.root, comm);
    case kBarrier: return (ref ? PMPI_Barrier : MPI_Barrier)(comm);
    default: return MPI_ERR_OTHER;
  }
}

std::string describe(const MpiCall& c) {
  char s[160];
  std::snprintf(s, sizeof s, "%s %s %s count %d root %d%s offset %d", nameOf(c).c_str(), c.type.name,
                c.kind == kAllreduce || c.kind == kReduce || c.kind == kReduceScatterBlock ? c.op.name : "-", c.count,
                c.root, c.inPlace ? " in place" : "", c.offset);
  return s;
}

// Runs c on comm: the interposed call on the real buffers, the reference on copies; returns
// a description of the first difference, or an empty string.
std::string runCall(const MpiCall& c0, MPI_Comm comm, uint64_t seed) {
  MpiCall c = c0;
  int rank = 0, n = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &n);
  c.root %= n;
  if (c.kind == kBarrier) {
    invoke(false, c, nullptr, nullptr, comm);
    return "";
  }
  const size_t cnt = static_cast<size_t>(c.count), nn = static_cast<size_t>(n), elem = c.type.elem;
  const bool isRoot = rank == c.root;
  // Elements of the logical input and of the receive buffer.
  size_t inLen = cnt, outLen = cnt;
  switch (c.kind) {
    case kAllgather: outLen = nn * cnt; break;
    case kAlltoall: inLen = outLen = nn * cnt; break;
    case kReduceScatterBlock: inLen = nn * cnt; break;
    case kGather: outLen = nn * cnt; break;
    case kScatter: inLen = nn * cnt; break;
    default: break;
  }
  // Which ranks use MPI_IN_PLACE: all, or (rooted calls) the root only.
  const bool rootedIp = c.kind == kReduce || c.kind == kGather || c.kind == kScatter;
  const bool ip = c.inPlace && (!rootedIp || isRoot);
  const uint64_t inSeed = randtest::mix(seed, 2 * static_cast<uint64_t>(rank));
  const uint64_t junkSeed = randtest::mix(seed, 2 * static_cast<uint64_t>(rank) + 1);

  Buf in(inLen, elem, c.offset), junk(outLen, elem, 0);
  fill(in.p(), inLen, c.type, c.op.op, inSeed);
  fill(junk.p(), outLen, c.type, c.op.op, junkSeed);
  // The reference: out of place, on copies.
  Buf refOut(outLen, elem, c.offset);
  std::memcpy(refOut.p(), junk.p(), outLen * elem);
  if (c.kind == kBcast && isRoot) std::memcpy(refOut.p(), in.p(), cnt * elem);
  // The call under test: out of place, or the in-place layout MPI defines.
  Buf send(inLen, elem, c.offset);
  std::memcpy(send.p(), in.p(), inLen * elem);
  const size_t recvLen = ip && (c.kind == kReduceScatterBlock) ? inLen : outLen;
  Buf out(recvLen, elem, (c.offset + 3) % 8);
  std::memcpy(out.p(), junk.p(), std::min(recvLen, outLen) * elem);
  if (c.kind == kBcast && isRoot) std::memcpy(out.p(), in.p(), cnt * elem);
  const void* sb = send.p();
  if (ip) {
    sb = MPI_IN_PLACE;
    switch (c.kind) {
      case kAllreduce: case kReduce: case kAlltoall: case kReduceScatterBlock:
        std::memcpy(out.p(), in.p(), inLen * elem);
        break;
      case kAllgather: std::memcpy(out.p() + rank * cnt * elem, in.p(), cnt * elem); break;
      case kGather: std::memcpy(out.p() + rank * cnt * elem, in.p(), cnt * elem); break;
      case kScatter: sb = send.p(); break;  // the root's receive buffer is MPI_IN_PLACE
      default: break;
    }
  }
  void* rb = ip && c.kind == kScatter ? MPI_IN_PLACE : out.p();

  // The reference runs first: a wrong interposed call then cannot disturb its inputs.
  invoke(true, c, in.p(), refOut.p(), comm);
  invoke(false, c, sb, rb, comm);

  char note[400];
  if (!send.guardsOk() || !out.guardsOk()) return "guard bytes around a buffer overwritten";
  if (!in.guardsOk() || !refOut.guardsOk()) return "guard bytes overwritten by the reference (MPI itself)";
  // The input must be unchanged where it was used out of place (a scatter's root: always).
  const bool inputUsed = c.kind != kBcast && (!ip || c.kind == kScatter) && (c.kind != kScatter || isRoot);
  if (inputUsed && std::memcmp(send.p(), in.p(), inLen * elem) != 0) return "the send buffer was modified";
  // The result, where MPI defines it.
  size_t check = outLen;
  if ((c.kind == kReduce || c.kind == kGather) && !isRoot) check = 0;
  if (c.kind == kScatter && ip) check = 0;  // the root's block stays in its send buffer
  const unsigned char* got = out.p();
  const unsigned char* want = refOut.p();
  for (size_t i = 0; i < check; ++i) {
    if (std::memcmp(got + i * elem, want + i * elem, elem) == 0) continue;
    uint64_t g = 0, w = 0;
    std::memcpy(&g, got + i * elem, std::min<size_t>(elem, 8));
    std::memcpy(&w, want + i * elem, std::min<size_t>(elem, 8));
    size_t wrong = 0;
    for (size_t j = i; j < check; ++j) wrong += std::memcmp(got + j * elem, want + j * elem, elem) != 0;
    std::snprintf(note, sizeof note, "%zu of %zu elements differ; first at %zu: got 0x%" PRIx64 ", MPI 0x%" PRIx64,
                  wrong, check, i, g, w);
    return note;
  }
  return "";
}

struct Options {
  uint64_t seed = 1;
  long calls = 300;
  long only = -1;  // run this call alone (a replay)
  size_t maxBytes = 4u << 20;
  bool verbose = false;
};

bool parseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "-v") o->verbose = true;
    else if (a == "--seed" && v) o->seed = std::strtoull(argv[++i], nullptr, 0);
    else if (a == "--calls" && v) o->calls = std::strtol(argv[++i], nullptr, 0);
    else if (a == "--only" && v) o->only = std::strtol(argv[++i], nullptr, 0);
    else if (a == "--max-bytes" && v) {
      char* end = nullptr;
      o->maxBytes = std::strtoull(argv[++i], &end, 0);
      if (*end == 'K') o->maxBytes <<= 10;
      if (*end == 'M') o->maxBytes <<= 20;
    } else return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int wrank = 0, wsize = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  MPI_Comm_size(MPI_COMM_WORLD, &wsize);
  Options opt;
  if (!parseArgs(argc, argv, &opt) || wsize > randtest::kMaxRanks) {
    if (wrank == 0)
      std::fprintf(stderr, "usage: mpirun -np 1..8 mpi_random [--seed S] [--calls N] [--only K] [--max-bytes B[K|M]] [-v]\n");
    MPI_Finalize();
    return 2;
  }
  randtest::GenOptions gen;
  gen.maxBytes = opt.maxBytes;
  gen.ranks = wsize;
  const auto t0 = std::chrono::steady_clock::now();

  std::map<std::string, std::array<long, 2>> counted;  // name -> {by sncl, by MPI}
  long index = 0, wrong = 0, splits = 0;
  uint64_t firstCase = 0;
  for (uint64_t s = 0; index < opt.calls; ++s) {
    const randtest::Session session = randtest::makeSession(opt.seed, s, firstCase, gen);
    firstCase += session.cases.size();
    for (const randtest::Case& kase : session.cases) {
      if (index >= opt.calls) break;
      const long first = index, last = index + static_cast<long>(kase.calls.size());
      index = last;
      if (opt.only >= 0 && (opt.only < first || opt.only >= last)) continue;
      MPI_Comm comm = MPI_COMM_WORLD;
      int color = 0;
      if (!kase.colors.empty()) {
        color = kase.colors[wrank] == SNCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : kase.colors[wrank];
        MPI_Comm_split(MPI_COMM_WORLD, color, kase.keys[wrank], &comm);
        ++splits;
      }
      for (long k = first; k < last && k < opt.calls; ++k) {
        if (opt.only >= 0 && k != opt.only) continue;
        const uint64_t callSeed = randtest::mix(kase.seed, static_cast<uint64_t>(k - first));
        const MpiCall c = translate(kase.calls[k - first], callSeed);
        if (wrank == 0 && opt.verbose)
          std::printf("call %ld: %s on %s\n", k, describe(c).c_str(), kase.colors.empty() ? "MPI_COMM_WORLD" : "a split");
        if (comm != MPI_COMM_NULL) {
          counted[nameOf(c)][c.predictSncl ? 0 : 1]++;
          const std::string bad = runCall(c, comm, callSeed);
          if (!bad.empty()) {
            ++wrong;
            std::printf("mpi_random: rank %d: WRONG call %ld: %s on %s: %s\n"
                        "  replay: mpirun -np %d mpi_random --seed %" PRIu64 " --only %ld --max-bytes %zu\n",
                        wrank, k, describe(c).c_str(),
                        kase.colors.empty() ? "MPI_COMM_WORLD" : ("the split of color " + std::to_string(color)).c_str(),
                        bad.c_str(), wsize, opt.seed, k, opt.maxBytes);
            std::fflush(stdout);
          }
        }
        if (c.type.derived) {
          MPI_Datatype d = c.type.t;
          MPI_Type_free(&d);
        }
      }
      if (comm != MPI_COMM_WORLD && comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
    }
  }

  // Through PMPI: the summary must not add to the drop-in's counts.
  long mine[2] = {wrong, 0}, all[2] = {0, 0};
  for (const auto& [name, n] : counted) mine[1] += n[0];
  PMPI_Allreduce(mine, all, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& [name, n] : counted)
    std::fprintf(stderr, "mpi_random: expect rank %d: %s: %ld by sncl, %ld by MPI\n", wrank, name.c_str(), n[0], n[1]);
  if (wrank == 0) {
    std::printf("mpi_random: seed %" PRIu64 ", %d ranks: calls %ld, wrong %ld, rank-calls expected by sncl %ld, splits %ld, %.1f s\n",
                opt.seed, wsize, opt.only >= 0 ? 1 : std::min(index, opt.calls), all[0], all[1], splits, secs);
    std::fflush(stdout);
  }
  MPI_Finalize();
  return all[0] ? 1 : 0;
}
