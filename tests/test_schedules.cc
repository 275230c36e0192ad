// All-Reduce schedules checked symbolically, no processes: every element reduced
// exactly once from every rank and delivered to every rank.
#include <catch2/catch.hpp>

#include <functional>

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
  checkRing(1024, 3000, 2, false);
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
