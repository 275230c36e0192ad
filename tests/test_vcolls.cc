// Variable-count collectives and scans (sncl_ext.h): snclAllGatherV, snclAlltoAllV,
// snclGatherV, snclScatterV, snclReduceScatterV, snclScan, snclExscan.
//
// First their schedules symbolically (tests/util/schedule_check: every element where it
// belongs, nothing else touched, no step that reads what it writes, no reliance on a
// transport buffering a send) on random layouts; then the calls on 3 and 8 ranks as
// processes: random per-rank counts (zeros, odd, primes, one of about a million elements),
// displacements in a random order with gaps, random roots, in place and not, several
// datatypes, on the NULL stream, on a stream and in groups (the caller's arrays are
// scribbled over as soon as a queued call returns: the call must own its copy), on a
// split comm, each result compared with a reference computed here; argument errors; counts
// that disagree across ranks; and one thread driving every rank of snclCommInitAll.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/direct_v.h"
#include "algorithms/pairwise.h"
#include "algorithms/scan.h"
#include "lib/exec/reduce.h"
#include "sncl/sncl.h"
#include "sncl/sncl_ext.h"
#include "tests/util/bus_ranks.h"
#include "tests/util/data.h"
#include "tests/util/launcher.h"
#include "tests/util/schedule_check.h"

using namespace sncl;

namespace {

constexpr size_t kLarge = 1000003;  // a prime of about a million elements

size_t randomCount(std::mt19937_64& rng) {
  static const size_t picks[] = {0, 0, 1, 2, 3, 5, 7, 13, 31, 97, 257, 1021};
  if (rng() % 3 == 0) return rng() % 3000;
  return picks[rng() % std::size(picks)];
}

std::vector<size_t> randomCounts(std::mt19937_64& rng, int n) {
  std::vector<size_t> c(static_cast<size_t>(n));
  for (auto& x : c) x = randomCount(rng);
  return c;
}

// Blocks in a random order with random gaps between them (and before the first).
struct Layout {
  std::vector<size_t> counts, displs;
  size_t extent = 0;
};

Layout place(const std::vector<size_t>& counts, std::mt19937_64& rng) {
  Layout l;
  l.counts = counts;
  l.displs.assign(counts.size(), 0);
  std::vector<size_t> order(counts.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  size_t at = rng() % 4;
  for (size_t p : order) {
    l.displs[p] = at;
    at += counts[p] + rng() % 5;
  }
  l.extent = at;
  for (size_t p = 0; p < counts.size(); ++p)  // an empty block's displacement is never used
    if (!counts[p] && rng() % 2) l.displs[p] = SIZE_MAX / 4;
  return l;
}

std::vector<size_t> prefix(const std::vector<size_t>& counts) {
  std::vector<size_t> off(counts.size(), 0);
  for (size_t p = 1; p < counts.size(); ++p) off[p] = off[p - 1] + counts[p - 1];
  return off;
}

// ---- Symbolic checks of the schedules ----

using test::symbolicKey;

std::string checkOutput(const test::SymbolicResult& res, int r, const std::vector<uint64_t>& expect) {
  if (!res.ok) return res.error;
  const auto& out = res.output[size_t(r)];
  for (size_t i = 0; i < expect.size(); ++i)
    if (i >= out.size() || out[i] != expect[i]) return fmt::format("rank {} element {} wrong", r, i);
  return "";
}

void symbolicMovers(int n, std::mt19937_64& rng) {
  // All-Gather-V.
  Layout l = place(randomCounts(rng, n), rng);
  auto res = test::runSymbolic(
      n, [&](int r) { return l.counts[size_t(r)]; }, [&](int) { return l.extent; }, false,
      [&](int r, algo::Schedule* s) {
        algo::DirectAllGatherV::build(r, n, l.counts[size_t(r)], l.counts.data(), l.displs.data(), s);
      });
  std::vector<uint64_t> expect(l.extent, 0);
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < l.counts[size_t(p)]; ++i) expect[l.displs[size_t(p)] + i] = symbolicKey(p, i);
  for (int r = 0; r < n; ++r) CHECK(checkOutput(res, r, expect) == "");

  // All-to-All-V: C[r][p] elements from r to p; in place needs C symmetric and one layout.
  for (bool inPlace : {false, true}) {
    std::vector<std::vector<size_t>> c(static_cast<size_t>(n), std::vector<size_t>(static_cast<size_t>(n)));
    for (int r = 0; r < n; ++r)
      for (int p = 0; p < n; ++p) c[size_t(r)][size_t(p)] = inPlace && p < r ? c[size_t(p)][size_t(r)] : randomCount(rng);
    std::vector<Layout> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      std::vector<size_t> rc(static_cast<size_t>(n));
      for (int p = 0; p < n; ++p) rc[size_t(p)] = c[size_t(p)][size_t(r)];
      send[size_t(r)] = place(c[size_t(r)], rng);
      recv[size_t(r)] = inPlace ? send[size_t(r)] : place(rc, rng);
    }
    res = test::runSymbolic(
        n, [&](int r) { return send[size_t(r)].extent; }, [&](int r) { return recv[size_t(r)].extent; }, inPlace,
        [&](int r, algo::Schedule* s) {
          const Layout &sl = send[size_t(r)], &rl = recv[size_t(r)];
          algo::DirectAlltoAllV::build(r, n, sl.counts.data(), sl.displs.data(), rl.counts.data(), rl.displs.data(),
                                       inPlace, s);
        });
    for (int r = 0; r < n; ++r) {
      const Layout& rl = recv[size_t(r)];
      std::vector<uint64_t> e(rl.extent, 0);
      if (inPlace)
        for (size_t i = 0; i < e.size(); ++i) e[i] = symbolicKey(r, i);  // gaps keep the input
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < rl.counts[size_t(p)]; ++i)
          e[rl.displs[size_t(p)] + i] = symbolicKey(p, send[size_t(p)].displs[size_t(r)] + i);
      CHECK(checkOutput(res, r, e) == "");
    }
  }

  // Gather-V and Scatter-V to and from a random root.
  const int root = int(rng() % size_t(n));
  l = place(randomCounts(rng, n), rng);
  res = test::runSymbolic(
      n, [&](int r) { return l.counts[size_t(r)]; }, [&](int r) { return r == root ? l.extent : 0; }, false,
      [&](int r, algo::Schedule* s) {
        algo::DirectGatherV::build(r, n, root, l.counts[size_t(r)], r == root ? l.counts.data() : nullptr,
                                   r == root ? l.displs.data() : nullptr, s);
      });
  std::vector<uint64_t> gathered(l.extent, 0);
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < l.counts[size_t(p)]; ++i) gathered[l.displs[size_t(p)] + i] = symbolicKey(p, i);
  CHECK(checkOutput(res, root, gathered) == "");
  res = test::runSymbolic(
      n, [&](int r) { return r == root ? l.extent : 0; }, [&](int r) { return l.counts[size_t(r)]; }, false,
      [&](int r, algo::Schedule* s) {
        algo::DirectScatterV::build(r, n, root, l.counts[size_t(r)], r == root ? l.counts.data() : nullptr,
                                    r == root ? l.displs.data() : nullptr, s);
      });
  for (int r = 0; r < n; ++r) {
    std::vector<uint64_t> e(l.counts[size_t(r)]);
    for (size_t i = 0; i < e.size(); ++i) e[i] = symbolicKey(root, l.displs[size_t(r)] + i);
    CHECK(checkOutput(res, r, e) == "");
  }
}

void symbolicReductions(int n, std::mt19937_64& rng) {
  for (bool inPlace : {false, true}) {
    const std::vector<size_t> counts = randomCounts(rng, n), off = prefix(counts);
    const size_t total = off.back() + counts.back();
    auto res = test::runSymbolic(
        n, [&](int) { return total; }, [&](int r) { return counts[size_t(r)]; }, inPlace,
        [&](int r, algo::Schedule* s) { algo::PairwiseReduceScatterV::build(r, n, counts.data(), off.data(), inPlace, s); });
    for (int r = 0; r < n; ++r) {
      std::vector<uint64_t> e(counts[size_t(r)], 0);
      for (size_t i = 0; i < e.size(); ++i)
        for (int q = 0; q < n; ++q) e[i] += symbolicKey(q, off[size_t(r)] + i);
      CHECK(checkOutput(res, r, e) == "");
    }
    for (bool exclusive : {false, true}) {
      for (size_t count : {size_t(0), size_t(1), size_t(37), size_t(100)}) {
        const size_t chunk = 1 + rng() % 16;
        for (bool doubling : {false, true}) {
        res = test::runSymbolic(n, count, count, inPlace, [&](int r, algo::Schedule* s) {
          if (doubling) algo::RecursiveDoublingScan::build(r, n, count, exclusive, s);
          else algo::ChainScan::build(r, n, count, chunk, exclusive, s);
        });
        for (int r = 0; r < n; ++r) {
          std::vector<uint64_t> e(count, 0);
          for (size_t i = 0; i < count; ++i) {
            if (exclusive && r == 0) e[i] = inPlace ? symbolicKey(0, i) : 0;  // untouched
            for (int q = 0; q < (exclusive ? r : r + 1); ++q) e[i] += symbolicKey(q, i);
          }
          INFO("scan n " << n << " count " << count << " chunk " << chunk << " exclusive " << exclusive
                         << " in place " << inPlace << " recursive doubling " << doubling);
          CHECK(checkOutput(res, r, e) == "");
        }
        }
      }
    }
  }
}

// ---- The calls on real ranks ----

bool isUnsigned(snclDataType_t t) { return t == snclUint8 || t == snclUint32 || t == snclUint64; }

// A reduction input: small integers, so that any order of combining them is exact in
// every type tested (8 ranks: |sum| <= 32, |prod| <= 256).
double reduceValue(snclDataType_t t, snclRedOp_t op, uint64_t salt, int q, size_t j) {
  const uint64_t h = test::mix64(salt ^ (uint64_t(q) << 40) ^ j);
  if (op == snclProd) {
    static const double s[] = {1, 2, -1}, u[] = {1, 2, 1};
    return (isUnsigned(t) ? u : s)[h % 3];
  }
  return isUnsigned(t) ? double(h % 5) : double(int(h % 9) - 4);
}

double combine(snclRedOp_t op, double a, double b) {
  switch (op) {
    case snclProd: return a * b;
    case snclMax: return std::max(a, b);
    case snclMin: return std::min(a, b);
    default: return a + b;
  }
}

const char* opText(snclRedOp_t op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  return op < 5 ? names[op] : "?";
}

struct Rank {
  snclComm_t comm;
  int rank, n;
  snclStream_t stream = nullptr;
  uint64_t cases = 0;  // numbers the cases: patterns differ from call to call
  int failures = 0;

  bool ok(const std::string& what, snclResult_t r, size_t wrong) {
    if (r == snclSuccess && wrong == 0) return true;
    fprintf(stderr, "rank %d/%d %s: %s, %zu wrong: %s\n", rank, n, what.c_str(), snclGetErrorString(r), wrong,
            r == snclSuccess ? "" : snclGetLastError(comm));
    ++failures;
    return false;
  }

  // How a call is issued: 0 the NULL stream, 1 a stream, 2 a group on the NULL stream.
  // Queued calls get their arrays scribbled over at once (they must have copied them).
  snclResult_t issue(int mode, const std::function<snclResult_t(snclStream_t)>& call,
                     std::initializer_list<std::vector<size_t>*> arrays) {
    if (mode == 2) snclGroupStart();
    snclResult_t r = call(mode == 1 ? stream : nullptr);
    if (mode != 0)
      for (auto* a : arrays) std::fill(a->begin(), a->end(), SIZE_MAX / 3);
    if (mode == 2) {
      const snclResult_t e = snclGroupEnd();
      if (r == snclSuccess) r = e;
    }
    if (mode == 1 && r == snclSuccess) r = snclStreamSynchronize(stream);
    return r;
  }

  int key(int p) const { return int(cases % 1000) * 64 + p; }  // a pattern per (case, rank)

  size_t wrongGaps(const std::vector<char>& buf, const Layout& l, size_t elem) {
    std::vector<char> covered(buf.size(), 0);
    for (size_t p = 0; p < l.counts.size(); ++p)
      if (l.counts[p]) std::fill_n(covered.begin() + long(l.displs[p] * elem), l.counts[p] * elem, 1);
    size_t wrong = 0;
    for (size_t i = 0; i < buf.size(); ++i) wrong += !covered[i] && buf[i] != char(0xA5);
    return wrong;
  }

  void allGatherV(std::mt19937_64& rng, snclDataType_t t, bool inPlace, int mode, int large) {
    ++cases;
    const size_t elem = dtypeSize(t), me = size_t(rank);
    std::vector<size_t> counts = randomCounts(rng, n);
    if (large >= 0) counts[size_t(large)] = kLarge;
    Layout l = place(counts, rng);
    std::vector<char> recv(l.extent * elem, char(0xA5)), send(counts[me] * elem + 1);
    // (a block of no element may have any displacement: in place only with elements)
    char* own = inPlace && counts[me] ? recv.data() + l.displs[me] * elem : send.data();
    test::fillPattern(elem, key(rank), own, counts[me]);
    std::vector<size_t> c = l.counts, d = l.displs;
    const snclResult_t r = issue(mode, [&](snclStream_t s) {
      return snclAllGatherV(own, counts[me], recv.data(), c.data(), d.data(), t, comm, s);
    }, {&c, &d});
    size_t wrong = 0;
    for (int p = 0; r == snclSuccess && p < n; ++p)
      wrong += test::countWrongPattern(elem, key(p), recv.data() + l.displs[size_t(p)] * elem, counts[size_t(p)]);
    if (r == snclSuccess) wrong += wrongGaps(recv, l, elem);
    ok(fmt::format("allgatherv {} {} mode {}", dtypeName(t), inPlace ? "in place" : "out of place", mode), r, wrong);
  }

  void alltoAllV(std::mt19937_64& rng, snclDataType_t t, bool inPlace, int mode, bool large) {
    ++cases;
    const size_t elem = dtypeSize(t), me = size_t(rank), ranks = size_t(n);
    std::vector<std::vector<size_t>> c(ranks, std::vector<size_t>(ranks));
    for (size_t r = 0; r < ranks; ++r)
      for (size_t p = 0; p < ranks; ++p) c[r][p] = inPlace && p < r ? c[p][r] : randomCount(rng);
    if (large) c[ranks - 1][0] = c[0][ranks - 1] = kLarge;
    std::vector<Layout> sendL(ranks), recvL(ranks);
    for (size_t r = 0; r < ranks; ++r) {
      std::vector<size_t> rc(ranks);
      for (size_t p = 0; p < ranks; ++p) rc[p] = c[p][r];
      sendL[r] = place(c[r], rng);
      recvL[r] = inPlace ? sendL[r] : place(rc, rng);
    }
    const Layout &sl = sendL[me], &rl = recvL[me];
    // Block p of rank q's input: elements sdispls[p].. of q's pattern.
    std::vector<char> send(sl.extent * elem + 1), recv(rl.extent * elem, char(0xA5));
    char* in = inPlace ? recv.data() : send.data();
    for (size_t p = 0; p < ranks; ++p)
      test::fillPattern(elem, key(rank), in + sl.displs[p] * elem * (sl.counts[p] != 0), sl.counts[p], sl.displs[p]);
    std::vector<size_t> sc = sl.counts, sd = sl.displs, rc = rl.counts, rd = rl.displs;
    const snclResult_t r = issue(mode, [&](snclStream_t s) {
      return snclAlltoAllV(in, sc.data(), sd.data(), recv.data(), rc.data(), rd.data(), t, comm, s);
    }, {&sc, &sd, &rc, &rd});
    size_t wrong = 0;
    for (size_t p = 0; r == snclSuccess && p < ranks; ++p)
      wrong += test::countWrongPattern(elem, key(int(p)), recv.data() + rl.displs[p] * elem * (rl.counts[p] != 0),
                                       rl.counts[p], sendL[p].displs[me]);
    if (r == snclSuccess && !inPlace) wrong += wrongGaps(recv, rl, elem);
    ok(fmt::format("alltoallv {} {} mode {}", dtypeName(t), inPlace ? "in place" : "out of place", mode), r, wrong);
  }

  void gatherV(std::mt19937_64& rng, snclDataType_t t, bool inPlace, int mode, int large) {
    ++cases;
    const size_t elem = dtypeSize(t), me = size_t(rank);
    const int root = int(rng() % size_t(n));
    std::vector<size_t> counts = randomCounts(rng, n);
    if (large >= 0) counts[size_t(large)] = kLarge;
    Layout l = place(counts, rng);
    const bool isRoot = rank == root;
    std::vector<char> recv(isRoot ? l.extent * elem : 0, char(0xA5)), send(counts[me] * elem + 1);
    char* own = inPlace && isRoot && counts[me] ? recv.data() + l.displs[me] * elem : send.data();
    test::fillPattern(elem, key(rank), own, counts[me]);
    // Off the root the arrays and recvbuff are not used: NULL.
    std::vector<size_t> c = l.counts, d = l.displs;
    const snclResult_t r = issue(mode, [&](snclStream_t s) {
      return snclGatherV(own, counts[me], isRoot ? recv.data() : nullptr, isRoot ? c.data() : nullptr,
                         isRoot ? d.data() : nullptr, t, root, comm, s);
    }, {&c, &d});
    size_t wrong = 0;
    for (int p = 0; r == snclSuccess && isRoot && p < n; ++p)
      wrong += test::countWrongPattern(elem, key(p), recv.data() + l.displs[size_t(p)] * elem, counts[size_t(p)]);
    if (r == snclSuccess && isRoot) wrong += wrongGaps(recv, l, elem);
    ok(fmt::format("gatherv {} root {} {} mode {}", dtypeName(t), root, inPlace ? "in place" : "out of place", mode), r,
       wrong);
  }

  void scatterV(std::mt19937_64& rng, snclDataType_t t, bool inPlace, int mode, int large) {
    ++cases;
    const size_t elem = dtypeSize(t), me = size_t(rank);
    const int root = int(rng() % size_t(n));
    std::vector<size_t> counts = randomCounts(rng, n);
    if (large >= 0) counts[size_t(large)] = kLarge;
    Layout l = place(counts, rng);
    const bool isRoot = rank == root;
    // Root's input: its pattern over the whole buffer; rank p gets elements displs[p]...
    std::vector<char> send(isRoot ? l.extent * elem : 0), recv(counts[me] * elem + 1, char(0xA5));
    if (isRoot) test::fillPattern(elem, key(root), send.data(), l.extent);
    const bool placed = inPlace && isRoot && counts[me];
    char* out = placed ? send.data() + l.displs[me] * elem : recv.data();
    std::vector<size_t> c = l.counts, d = l.displs;
    const snclResult_t r = issue(mode, [&](snclStream_t s) {
      return snclScatterV(isRoot ? send.data() : nullptr, isRoot ? c.data() : nullptr, isRoot ? d.data() : nullptr, out,
                          counts[me], t, root, comm, s);
    }, {&c, &d});
    size_t wrong = r == snclSuccess ? test::countWrongPattern(elem, key(root), out, counts[me], l.displs[me]) : 0;
    if (r == snclSuccess && !placed) wrong += recv.back() != char(0xA5);
    ok(fmt::format("scatterv {} root {} {} mode {}", dtypeName(t), root, inPlace ? "in place" : "out of place", mode), r,
       wrong);
  }

  void reduceScatterV(std::mt19937_64& rng, snclDataType_t t, snclRedOp_t op, bool inPlace, int mode, bool large) {
    ++cases;
    const size_t elem = dtypeSize(t), me = size_t(rank);
    std::vector<size_t> counts = randomCounts(rng, n);
    if (large) counts[size_t(n - 1)] = kLarge;
    const std::vector<size_t> off = prefix(counts);
    const size_t total = off.back() + counts.back();
    std::vector<char> send(total * elem + 1), recv(counts[me] * elem + 1, char(0xA5));
    for (size_t j = 0; j < total; ++j) test::storeElement(t, send.data(), j, reduceValue(t, op, cases, rank, j));
    char* out = inPlace ? send.data() : recv.data();
    std::vector<size_t> c = counts;
    const snclResult_t r = issue(mode, [&](snclStream_t s) {
      return snclReduceScatterV(send.data(), out, c.data(), t, op, comm, s);
    }, {&c});
    size_t wrong = 0;
    for (size_t i = 0; r == snclSuccess && i < counts[me]; ++i) {
      double e = reduceValue(t, op, cases, 0, off[me] + i);
      for (int q = 1; q < n; ++q) e = combine(op, e, reduceValue(t, op, cases, q, off[me] + i));
      wrong += test::loadElement(t, out, i) != e;
    }
    if (r == snclSuccess && !inPlace) wrong += recv.back() != char(0xA5);
    ok(fmt::format("reducescatterv {} {} {} mode {}", dtypeName(t), opText(op), inPlace ? "in place" : "out of place",
                   mode),
       r, wrong);
  }

  void scan(bool exclusive, snclDataType_t t, snclRedOp_t op, size_t count, bool inPlace, int mode) {
    ++cases;
    const size_t elem = dtypeSize(t);
    std::vector<char> send(count * elem + 1), recv(count * elem + 1, char(0xA5));
    for (size_t i = 0; i < count; ++i) test::storeElement(t, send.data(), i, reduceValue(t, op, cases, rank, i));
    const std::vector<char> input = send;
    char* out = inPlace ? send.data() : recv.data();
    const snclResult_t r = issue(mode, [&](snclStream_t s) {
      return (exclusive ? snclExscan : snclScan)(send.data(), out, count, t, op, comm, s);
    }, {});
    size_t wrong = 0;
    if (r == snclSuccess && exclusive && rank == 0) {
      // Unchanged: the input in place, the filler otherwise.
      wrong = inPlace ? memcmp(out, input.data(), count * elem) != 0 : size_t(std::count(recv.begin(), recv.end(), char(0xA5))) != recv.size();
    } else {
      for (size_t i = 0; r == snclSuccess && i < count; ++i) {
        double e = reduceValue(t, op, cases, 0, i);
        for (int q = 1; q < (exclusive ? rank : rank + 1); ++q) e = combine(op, e, reduceValue(t, op, cases, q, i));
        wrong += test::loadElement(t, out, i) != e;
      }
    }
    ok(fmt::format("{} {} {} count {} {} mode {}", exclusive ? "exscan" : "scan", dtypeName(t), opText(op), count,
                   inPlace ? "in place" : "out of place", mode),
       r, wrong);
  }

  // Every call, a few cases each: dtypes, in place and not, the three ways to issue (fixed
  // in the first round, drawn after), one large block per call in the large round.
  void all(std::mt19937_64& rng, bool large, bool drawn) {
    const snclDataType_t movers[] = {snclUint8, snclFloat16, snclInt32, snclFloat64};
    for (size_t i = 0; i < std::size(movers); ++i) {
      const bool inPlace = drawn ? rng() % 2 : i % 2 == 1;
      const int mode = drawn ? int(rng() % 3) : int(i % 3);
      const int big = large && i == 0 ? int(rng() % size_t(n)) : -1;
      allGatherV(rng, movers[i], inPlace, mode, big);
      alltoAllV(rng, movers[i], inPlace, mode, big >= 0);
      gatherV(rng, movers[i], !inPlace, mode, big);
      scatterV(rng, movers[i], inPlace, mode, big);
    }
    const snclDataType_t reduced[] = {snclInt8, snclUint8, snclBfloat16, snclFloat32, snclFloat64, snclInt64};
    const snclRedOp_t ops[] = {snclSum, snclMax, snclMin, snclSum, snclProd, snclProd};
    for (size_t i = 0; i < std::size(reduced); ++i) {
      reduceScatterV(rng, reduced[i], ops[i], i % 2 == 0, int(i % 3), large && i == 3);
      for (bool exclusive : {false, true}) {
        const size_t count = large && i == 3 ? kLarge : std::vector<size_t>{0, 1, 97, 4099, 70001}[i % 5];
        scan(exclusive, reduced[i], ops[i], count, i % 2 == 1, int((i + exclusive) % 3));
      }
    }
  }

  // Argument errors: each fails on every rank that makes the call, before any message.
  void errors() {
    const size_t me = size_t(rank);
    std::vector<size_t> counts(static_cast<size_t>(n), 4), displs(static_cast<size_t>(n));
    for (size_t p = 0; p < size_t(n); ++p) displs[p] = p * 4;
    std::vector<float> buf(size_t(n) * 4 + 8), other(size_t(n) * 4 + 8);
    auto expect = [&](const char* what, snclResult_t r, const char* words) {
      const std::string msg = snclGetLastError(comm);
      if (r == snclInvalidArgument && msg.find(words) != std::string::npos) return;
      fprintf(stderr, "rank %d: %s: %s, '%s' (wanted InvalidArgument naming '%s')\n", rank, what, snclGetErrorString(r),
              msg.c_str(), words);
      ++failures;
    };
    float* own = buf.data() + displs[me];
    expect("null recvcounts", snclAllGatherV(own, 4, buf.data(), nullptr, displs.data(), snclFloat32, comm, nullptr),
           "recvcounts is NULL");
    expect("null displs", snclAllGatherV(own, 4, buf.data(), counts.data(), nullptr, snclFloat32, comm, nullptr),
           "displs is NULL");
    expect("overlap", snclAllGatherV(own + 1, 4, buf.data(), counts.data(), displs.data(), snclFloat32, comm, nullptr),
           "overlap");
    expect("sendcount", snclAllGatherV(other.data(), 3, buf.data(), counts.data(), displs.data(), snclFloat32, comm, nullptr),
           "differs");
    expect("null recvbuff", snclAllGatherV(other.data(), 4, nullptr, counts.data(), displs.data(), snclFloat32, comm, nullptr),
           "recvbuff is NULL");
    expect("bad dtype", snclAllGatherV(own, 4, buf.data(), counts.data(), displs.data(), snclNumTypes, comm, nullptr),
           "datatype");
    std::vector<size_t> huge = displs;
    huge[me] = SIZE_MAX - 2;
    expect("overflow", snclAllGatherV(other.data(), 4, buf.data(), counts.data(), huge.data(), snclFloat32, comm, nullptr),
           "overflows");
    std::vector<size_t> moved = displs;
    std::rotate(moved.begin(), moved.begin() + 1, moved.end());
    if (n > 1)
      expect("alltoallv in place, two layouts",
             snclAlltoAllV(buf.data(), counts.data(), displs.data(), buf.data(), counts.data(), moved.data(), snclFloat32,
                           comm, nullptr),
             "in place");
    expect("alltoallv null sdispls",
           snclAlltoAllV(other.data(), counts.data(), nullptr, buf.data(), counts.data(), displs.data(), snclFloat32, comm,
                         nullptr),
           "sdispls is NULL");
    expect("gatherv root -1", snclGatherV(other.data(), 4, buf.data(), counts.data(), displs.data(), snclFloat32, -1, comm, nullptr),
           "root");
    expect("gatherv root n", snclGatherV(other.data(), 4, buf.data(), counts.data(), displs.data(), snclFloat32, n, comm, nullptr),
           "root");
    // Root-only arguments: only the root calls (it fails before any message).
    if (rank == 0) {
      expect("gatherv null recvcounts at root",
             snclGatherV(other.data(), 4, buf.data(), nullptr, displs.data(), snclFloat32, 0, comm, nullptr), "recvcounts");
      expect("scatterv null displs at root",
             snclScatterV(buf.data(), counts.data(), nullptr, other.data(), 4, snclFloat32, 0, comm, nullptr), "displs");
      expect("scatterv overlap at root",
             snclScatterV(buf.data(), counts.data(), displs.data(), buf.data() + 1, 4, snclFloat32, 0, comm, nullptr),
             "overlap");
    }
    expect("reducescatterv bad op",
           snclReduceScatterV(buf.data(), other.data(), counts.data(), snclFloat32, snclRedOp_t(snclNumOps + 7), comm, nullptr),
           "");
    expect("reducescatterv null recvcounts",
           snclReduceScatterV(buf.data(), other.data(), nullptr, snclFloat32, snclSum, comm, nullptr), "recvcounts is NULL");
    expect("reducescatterv overlap",
           snclReduceScatterV(buf.data(), buf.data() + 1, counts.data(), snclFloat32, snclSum, comm, nullptr), "overlap");
    expect("scan avg", snclScan(buf.data(), other.data(), 4, snclFloat32, snclAvg, comm, nullptr), "snclAvg");
    expect("scan overlap", snclScan(buf.data(), buf.data() + 1, 4, snclFloat32, snclSum, comm, nullptr), "overlap");
    expect("exscan null sendbuff", snclExscan(nullptr, other.data(), 4, snclFloat32, snclSum, comm, nullptr),
           "sendbuff is NULL");
    // The planner: one algorithm each; the v-forms are not described by a size alone.
    char plan[32] = "";
    if (snclCommExplainPlan(comm, "exscan", 1 << 20, plan, sizeof plan, nullptr) != snclSuccess ||
        std::string(plan) != "chain" ||
        snclCommExplainPlan(comm, "allgatherv", 1 << 20, plan, sizeof plan, nullptr) != snclInvalidArgument) {
      fprintf(stderr, "rank %d: snclCommExplainPlan of the scans or v-forms: '%s'\n", rank, plan);
      ++failures;
    }
    // A failed call fails its group, and nothing in it runs.
    snclGroupStart();
    snclResult_t first = snclScan(buf.data(), other.data(), 4, snclFloat32, snclSum, comm, nullptr);
    snclResult_t bad = snclAllGatherV(own, 4, buf.data(), nullptr, displs.data(), snclFloat32, comm, nullptr);
    snclResult_t end = snclGroupEnd();
    if (first != snclSuccess || bad != snclInvalidArgument || end != snclInvalidArgument) {
      fprintf(stderr, "rank %d: group with a bad call: %d %d %d\n", rank, first, bad, end);
      ++failures;
    }
  }
};

// A comm whose scans run algorithm `scans` ("chain" or "hd").
snclComm_t initWithScans(int rank, int n, const snclUniqueId& id, const char* scans) {
  const std::string algo = fmt::format("scan:{0};exscan:{0}", scans);
  setenv("SNCL_ALGO", algo.c_str(), 1);
  snclComm_t comm = nullptr;
  const snclResult_t r = snclCommInitRank(&comm, n, id, rank);
  unsetenv("SNCL_ALGO");
  return r == snclSuccess ? comm : nullptr;
}

int runMatrix(int rank, int n, const snclUniqueId& id) {
  snclComm_t comm = initWithScans(rank, n, id, "chain");
  if (!comm) return 2;
  int failures = 0;
  {
    Rank me{comm, rank, n};
    if (snclStreamCreate(&me.stream) != snclSuccess) return 2;
    std::mt19937_64 rng(0x5eed0000u + unsigned(n));  // the same draws on every rank
    me.all(rng, true, false);
    for (int round = 0; round < 6; ++round) me.all(rng, false, round > 0);
    me.errors();
    // The comm still works after the refused calls.
    me.allGatherV(rng, snclFloat32, false, 0, -1);
    me.scan(false, snclInt32, snclSum, 33, false, 0);
    failures += me.failures;

    // The scans by recursive doubling, on a second comm met through an id sent over the first.
    snclUniqueId id2{};
    if (rank == 0 && snclGetUniqueId(&id2) != snclSuccess) return 2;
    if (snclBroadcast(&id2, &id2, sizeof(id2), snclUint8, 0, comm, nullptr) != snclSuccess) return 2;
    snclComm_t doubling = initWithScans(rank, n, id2, "hd");
    if (!doubling) return 2;
    Rank d{doubling, rank, n};
    d.stream = me.stream;  // a stream serves calls of any comm
    char plan[32] = "";
    if (snclCommExplainPlan(doubling, "scan", 64, plan, sizeof plan, nullptr) != snclSuccess || std::string(plan) != "hd")
      ++failures;
    const snclDataType_t types[] = {snclInt8, snclUint8, snclBfloat16, snclFloat32, snclFloat64, snclInt64};
    const snclRedOp_t ops[] = {snclSum, snclMax, snclMin, snclSum, snclProd, snclProd};
    for (size_t i = 0; i < std::size(types); ++i)
      for (bool exclusive : {false, true})
        for (size_t count : {size_t(0), size_t(1), size_t(257), size_t(4099)})
          d.scan(exclusive, types[i], ops[i], count, (i + count) % 2 == 1, int((i + exclusive) % 3));
    failures += d.failures;
    if (snclCommDestroy(doubling) != snclSuccess) ++failures;

    // A split comm: two colors, ranks in reverse order.
    snclComm_t sub = nullptr;
    if (snclCommSplit(comm, rank % 2, n - rank, &sub, nullptr) != snclSuccess) return 3;
    int subRank = -1, subN = 0;
    snclCommUserRank(sub, &subRank);
    snclCommCount(sub, &subN);
    if (subRank != (n - 1 - rank) / 2) ++failures;  // reverse order within each color
    Rank s{sub, subRank, subN};
    std::mt19937_64 subRng(0xc0102u + unsigned(rank % 2));  // the same draws within each color
    s.allGatherV(subRng, snclInt32, true, 0, -1);
    s.alltoAllV(subRng, snclInt32, false, 0, false);
    s.gatherV(subRng, snclFloat64, false, 0, -1);
    s.scatterV(subRng, snclUint8, true, 0, -1);
    s.reduceScatterV(subRng, snclFloat32, snclSum, false, 0, false);
    s.scan(false, snclInt32, snclMax, 101, false, 0);
    s.scan(true, snclFloat64, snclSum, 101, true, 0);
    failures += s.failures;
    if (snclCommDestroy(sub) != snclSuccess) ++failures;
    if (snclStreamDestroy(me.stream) != snclSuccess) ++failures;
  }
  if (snclCommDestroy(comm) != snclSuccess) ++failures;
  return failures ? 1 : 0;
}

}  // namespace

TEST_CASE("v-collective and scan schedules place every element, symbolically", "[vcolls][schedules]") {
  std::mt19937_64 rng(20261204);
  for (int n : {1, 2, 3, 5, 8}) {
    INFO("nranks " << n);
    for (int round = 0; round < 4; ++round) {
      symbolicMovers(n, rng);
      symbolicReductions(n, rng);
    }
  }
}

TEST_CASE("v-collectives and scans are exact on 3 and 8 processes", "[vcolls][process]") {
  for (int n : {3, 8}) {
    INFO("nranks " << n);
    CHECK(test::allSucceeded(test::runRanks(n, runMatrix, 300000)));
  }
  CHECK(test::countShmSegments() == 0);
}

TEST_CASE("counts that disagree across ranks fail the call instead of hanging", "[vcolls][errors][process]") {
  auto exits = test::runRanks(3, [](int rank, int n, const snclUniqueId& id) {
    snclConfig_t config = SNCL_CONFIG_INITIALIZER;
    config.timeoutMs = 8000;
    snclComm_t comm = nullptr;
    if (snclCommInitRankConfig(&comm, n, id, rank, &config) != snclSuccess) return 2;
    // Root 0 expects 6 elements from rank 1 (which sends 5) and 3 from rank 2 (which sends
    // none): the root sees a message whose size is not the one it posted.
    std::vector<size_t> counts = {2, 6, 3}, displs = {0, 2, 8};
    const size_t mine[] = {2, 5, 0};
    std::vector<int32_t> send(8, rank), recv(16, -1);
    const auto start = std::chrono::steady_clock::now();
    const snclResult_t r = snclGatherV(send.data(), mine[rank], rank == 0 ? recv.data() : nullptr,
                                       rank == 0 ? counts.data() : nullptr, rank == 0 ? displs.data() : nullptr,
                                       snclInt32, 0, comm, nullptr);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    int bad = 0;
    if (rank == 0) {
      const std::string msg = snclGetLastError(comm);
      if (r != snclInvalidArgument || msg.find("counts differ") == std::string::npos || seconds > 6) {
        fprintf(stderr, "rank 0: mismatched GatherV gave %s after %.1f s: %s\n", snclGetErrorString(r), seconds,
                msg.c_str());
        bad = 1;
      }
    }
    snclCommAbort(comm);
    return bad;
  }, 60000);
  CHECK(test::allSucceeded(exits));
  CHECK(test::countShmSegments() == 0);
}

TEST_CASE("one thread drives every rank's v-collectives through a group", "[vcolls][threads]") {
  for (int n : {1, 3}) {
    INFO("nranks " << n);
    std::vector<snclComm_t> comms(static_cast<size_t>(n));
    REQUIRE(snclCommInitAll(comms.data(), n, nullptr) == snclSuccess);
    std::mt19937_64 rng(77);
    const Layout l = place(randomCounts(rng, n), rng);
    const std::vector<size_t> rsCounts = randomCounts(rng, n), off = prefix(rsCounts);
    const size_t total = off.back() + rsCounts.back(), count = 513;
    std::vector<std::vector<int32_t>> gathered(static_cast<size_t>(n)), rsIn(static_cast<size_t>(n)), rsOut(static_cast<size_t>(n)), scanIn(static_cast<size_t>(n)),
        scanOut(static_cast<size_t>(n));
    std::vector<std::vector<int32_t>> own(static_cast<size_t>(n));
    REQUIRE(snclGroupStart() == snclSuccess);
    for (int r = 0; r < n; ++r) {
      const size_t me = size_t(r);
      gathered[me].assign(l.extent, -1);
      own[me].resize(l.counts[me] + 1);
      test::fillPattern(4, r, own[me].data(), l.counts[me]);
      rsIn[me].resize(total + 1);
      for (size_t j = 0; j < total; ++j) rsIn[me][j] = int32_t(j % 7) + r;
      rsOut[me].assign(rsCounts[me] + 1, -1);
      scanIn[me].resize(count);
      for (size_t i = 0; i < count; ++i) scanIn[me][i] = int32_t(i % 5) * (r + 1);
      scanOut[me].assign(count, -1);
      CHECK(snclAllGatherV(own[me].data(), l.counts[me], gathered[me].data(), l.counts.data(), l.displs.data(),
                           snclInt32, comms[me], nullptr) == snclSuccess);
      CHECK(snclReduceScatterV(rsIn[me].data(), rsOut[me].data(), rsCounts.data(), snclInt32, snclSum, comms[me],
                               nullptr) == snclSuccess);
      CHECK(snclExscan(scanIn[me].data(), scanOut[me].data(), count, snclInt32, snclSum, comms[me], nullptr) ==
            snclSuccess);
    }
    REQUIRE(snclGroupEnd() == snclSuccess);
    for (int r = 0; r < n; ++r) {
      const size_t me = size_t(r);
      for (int p = 0; p < n; ++p)
        CHECK(test::countWrongPattern(4, p, gathered[me].data() + l.displs[size_t(p)], l.counts[size_t(p)]) == 0);
      size_t wrong = 0;
      for (size_t i = 0; i < rsCounts[me]; ++i) {
        int32_t e = 0;
        for (int q = 0; q < n; ++q) e += int32_t((off[me] + i) % 7) + q;
        wrong += rsOut[me][i] != e;
      }
      for (size_t i = 0; i < count; ++i) {
        int32_t e = 0;
        for (int q = 0; q < r; ++q) e += int32_t(i % 5) * (q + 1);
        wrong += scanOut[me][i] != (r == 0 ? -1 : e);
      }
      CHECK(wrong == 0);
    }
    for (auto c : comms) CHECK(snclCommDestroy(c) == snclSuccess);
  }
}

TEST_CASE("a link lost mid-All-to-All-V (in place) is rerouted and the call re-run exactly", "[vcolls][fault]") {
  // The emulated bus on a topology with two planes: the link goes down as call 2 starts;
  // the in-place input comes back from what the comm kept, and the call runs again.
  const std::string here = __FILE__;
  setenv("SNCL_TOPO_FILE", (here.substr(0, here.rfind("/tests/")) + "/topologies/supernode-2plane-2x4.json").c_str(), 1);
  setenv("SNCL_BUS_DETECT_US", "50", 1);
  constexpr int n = 8;
  constexpr size_t ranks = n;
  auto comms = test::busComms(n, "link=n0.e1-n0.l1p0:down@op=2");
  unsetenv("SNCL_TOPO_FILE");
  unsetenv("SNCL_BUS_DETECT_US");
  REQUIRE(comms.size() == ranks);
  std::mt19937_64 rng(4242);
  std::vector<std::vector<size_t>> c(ranks, std::vector<size_t>(ranks));
  for (size_t r = 0; r < ranks; ++r)
    for (size_t p = 0; p < ranks; ++p) c[r][p] = p < r ? c[p][r] : (p == r ? 0 : 20000 + rng() % 50000);
  std::vector<Layout> l(ranks);
  for (size_t r = 0; r < ranks; ++r) l[r] = place(c[r], rng);
  std::vector<int> wrong(ranks, 0);
  std::vector<snclResult_t> results(ranks, snclInternalError);
  test::onEveryRank(n, [&](int r) {
    const size_t me = size_t(r);
    // Call 1: a healthy scan.
    std::vector<int32_t> x(100, r + 1), y(100, 0);
    if (snclScan(x.data(), y.data(), 100, snclInt32, snclSum, comms[me], nullptr) != snclSuccess ||
        y[0] != (r + 1) * (r + 2) / 2)
      ++wrong[me];
    // Call 2: block p of rank r is elements displs[p].. of r's pattern; it gets p's block for r.
    std::vector<int32_t> buf(l[me].extent, -7);
    for (size_t p = 0; p < ranks; ++p)
      if (l[me].counts[p]) test::fillPattern(4, r, buf.data() + l[me].displs[p], l[me].counts[p], l[me].displs[p]);
    results[me] = snclAlltoAllV(buf.data(), l[me].counts.data(), l[me].displs.data(), buf.data(), l[me].counts.data(),
                                l[me].displs.data(), snclInt32, comms[me], nullptr);
    for (size_t p = 0; results[me] == snclSuccess && p < ranks; ++p)
      if (l[me].counts[p])
        wrong[me] += test::countWrongPattern(4, int(p), buf.data() + l[me].displs[p], l[me].counts[p],
                                             l[p].displs[me]) != 0;
  });
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(results[size_t(r)] == snclSuccess);
    CHECK(wrong[size_t(r)] == 0);
    snclFaultStats_t st{};
    REQUIRE(snclCommGetFaultStats(comms[size_t(r)], &st) == snclSuccess);
    CHECK(st.reroutes == 1);
    CHECK(st.linkFailures == 1);
  }
  test::destroyAll(comms);
}
