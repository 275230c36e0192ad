// All-Reduce schedules checked symbolically, no processes: every element reduced
// exactly once from every rank and delivered to every rank.
#include <catch2/catch.hpp>

#include <functional>
#include <random>

#include "algorithms/direct.h"
#include "algorithms/ring.h"
#include "tests/util/schedule_check.h"

using namespace sncl;

namespace {

void checkAllReduce(int nranks, size_t count, bool inPlace, const std::function<void(int, algo::Schedule*)>& build) {
  auto res = test::runSymbolic(nranks, count, count, inPlace, build);
  INFO("nranks " << nranks << " count " << count << " inPlace " << inPlace);
  REQUIRE(res.ok);
  for (size_t i = 0; i < count; ++i) {
    uint64_t expect = 0;
    for (int r = 0; r < nranks; ++r) expect += test::symbolicKey(r, i);
    for (int r = 0; r < nranks; ++r) {
      if (res.output[r][i] != expect) FAIL("rank " << r << " element " << i << " wrong");
    }
  }
}

void checkRing(int nranks, size_t count, size_t chunk, bool inPlace) {
  INFO("ring chunk " << chunk);
  checkAllReduce(nranks, count, inPlace, [&](int rank, algo::Schedule* s) {
    algo::RingAllReduce::build(rank, nranks, count, chunk, s);
  });
}

}  // namespace

TEST_CASE("ring all-reduce schedule is exact for many rank counts", "[schedule][ring]") {
  for (int n : {1, 2, 3, 4, 5, 7, 8, 13, 16, 17, 31, 64}) {
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(n), size_t(3 * n + 1), size_t(1000)}) {
      for (size_t chunk : {size_t(1), size_t(5), size_t(64)}) {
        checkRing(n, count, chunk, false);
        checkRing(n, count, chunk, true);
      }
    }
  }
}

TEST_CASE("ring all-reduce schedule scales to 1024 ranks", "[schedule][ring]") {
  // Arithmetic without memory of its own that 1,024 ranks would show wrong and 256 not:
  // sanitized builds (20 s here) stop at 256.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  checkRing(1024, 3000, 2, false);
#else
  checkRing(256, 3000, 2, false);
#endif
}

TEST_CASE("ring schedule has 2(n-1) steps per round", "[schedule][ring]") {
  algo::Schedule s;
  algo::RingAllReduce::build(0, 8, 8 * 10 * 3, 10, &s);  // 3 full rounds
  CHECK(s.numSteps() == 3 * 2 * 7);
  for (size_t i = 0; i < s.numSteps(); ++i) CHECK(s.stepEnd[i] - s.stepBegin(i) == 2);
}

TEST_CASE("direct all-reduce schedule is exact and reduces in rank order", "[schedule][direct]") {
  for (int n : {1, 2, 3, 5, 8, 17, 64}) {
    for (size_t count : {size_t(0), size_t(1), size_t(9), size_t(100)}) {
      for (bool inPlace : {false, true}) {
        checkAllReduce(n, count, inPlace, [&](int rank, algo::Schedule* s) { algo::DirectAllReduce::build(rank, n, count, s); });
      }
    }
  }
  algo::Schedule s;
  algo::DirectAllReduce::build(2, 4, 10, &s);
  REQUIRE(s.numSteps() == 5);  // exchange, ranks 1..3 in order, copy out
  CHECK(s.ops[s.stepBegin(2)].kind == algo::OpKind::Reduce);  // rank 2's own input third
}

// The checker itself: a step's hazards found by its sweep are exactly those a comparison of
// every pair finds, on random steps of local copies and reductions over three buffers.
TEST_CASE("the symbolic checker finds exactly the steps whose ops overlap a write", "[schedule][checker]") {
  std::mt19937 rng(Catch::rngSeed());
  const size_t n = 64;
  int hazards = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    algo::Schedule s;
    const int ops = 1 + int(rng() % 6);
    for (int i = 0; i < ops; ++i) {
      const auto kind = rng() % 2 ? algo::OpKind::Copy : algo::OpKind::Reduce;
      const auto srcBuf = algo::Buf(rng() % 3), dstBuf = algo::Buf(1 + rng() % 2);  // never write the input
      const size_t count = rng() % 9, src = rng() % (n - count + 1), dst = rng() % (n - count + 1);
      s.add({kind, srcBuf, dstBuf, -1, 0, src, dst, count});
    }
    s.endStep();
    s.scratchCount = n;
    // Every pair: an op that writes a range another op reads or writes (a reduction reads
    // and writes its destination; a copy onto itself writes nothing).
    bool expect = false;
    auto writes = [](const algo::Op& o) { return !(o.kind == algo::OpKind::Copy && o.srcBuf == o.dstBuf && o.src == o.dst); };
    auto overlap = [](size_t a, size_t b, size_t c) { return a < b + c; };
    for (const auto& a : s.ops)
      for (const auto& b : s.ops) {
        if (&a == &b || a.count == 0 || b.count == 0 || !writes(a)) continue;
        const bool onDst = a.dstBuf == b.dstBuf && writes(b) && overlap(a.dst, b.dst, b.count) && overlap(b.dst, a.dst, a.count);
        const bool onSrc = a.dstBuf == b.srcBuf && overlap(a.dst, b.src, b.count) && overlap(b.src, a.dst, a.count);
        expect |= onDst || onSrc;
      }
    auto res = test::runSymbolic(1, n, n, false, [&](int, algo::Schedule* out) { *out = s; });
    INFO("trial " << trial);
    CHECK(res.ok == !expect);
    if (expect) CHECK_THAT(res.error, Catch::Matchers::Contains("of the same step"));
    hazards += expect;
  }
  CHECK(hazards > 200);  // both outcomes are common
  CHECK(hazards < 1800);
}

// The checker refuses what no transport could run: receives that wait on each other, a send
// nobody receives, a message to a rank that is not there.
TEST_CASE("the symbolic checker finds deadlocks, unreceived sends and peers out of range", "[schedule][checker]") {
  using algo::Buf;
  using algo::OpKind;
  auto run = [](const std::function<void(int, algo::Schedule*)>& build) {
    return test::runSymbolic(2, 4, 4, false, build);
  };
  // Each rank receives before it sends, in steps of their own.
  auto res = run([](int r, algo::Schedule* s) {
    s->add({OpKind::Recv, Buf::Output, Buf::Output, 1 - r, 0, 0, 0, 4});
    s->endStep();
    s->add({OpKind::Send, Buf::Input, Buf::Input, 1 - r, 0, 0, 0, 4});
    s->endStep();
  });
  CHECK_FALSE(res.ok);
  CHECK_THAT(res.error, Catch::Matchers::Contains("deadlock"));
  // Rank 0 sends, rank 1 posts nothing: the send never completes.
  res = run([](int r, algo::Schedule* s) {
    if (r == 0) s->add({OpKind::Send, Buf::Input, Buf::Input, 1, 0, 0, 0, 4});
    s->endStep();
  });
  CHECK_FALSE(res.ok);
  CHECK_THAT(res.error, Catch::Matchers::Contains("deadlock: rank 0"));
  // The same exchange in one step, receive first on one side and send first on the other,
  // is exact; with a peer out of range it is refused.
  res = run([](int r, algo::Schedule* s) {
    if (r == 0) s->add({OpKind::Recv, Buf::Output, Buf::Output, 1, 7, 0, 0, 4});
    s->add({OpKind::Send, Buf::Input, Buf::Input, 1 - r, 7, 0, 0, 4});
    if (r == 1) s->add({OpKind::Recv, Buf::Output, Buf::Output, 0, 7, 0, 0, 4});
    s->endStep();
  });
  REQUIRE(res.ok);
  for (int r = 0; r < 2; ++r)
    for (size_t i = 0; i < 4; ++i) CHECK(res.output[r][i] == test::symbolicKey(1 - r, i));
  res = run([](int r, algo::Schedule* s) {
    s->add({OpKind::Send, Buf::Input, Buf::Input, r == 0 ? 2 : 0, 0, 0, 0, 4});
    s->endStep();
  });
  CHECK_FALSE(res.ok);
  CHECK_THAT(res.error, Catch::Matchers::Contains("rank 0: a message to or from rank 2 of 2"));
}
