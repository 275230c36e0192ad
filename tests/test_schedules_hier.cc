// Hierarchical All-Reduce schedules run symbolically (no processes) up to 1,024 ranks, on
// two and three levels, with every inner and outer algorithm; halving-doubling at 1,024.
#include <catch2/catch.hpp>

#include <vector>

#include "algorithms/halving_doubling.h"
#include "algorithms/hierarchical.h"
#include "tests/util/schedule_check.h"

using namespace sncl;

namespace {

// Levels for nranks = product of sizes: level l groups consecutive blocks of
// sizes[0] * ... * sizes[l] ranks.
std::vector<std::vector<int>> blockLevels(int nranks, const std::vector<int>& sizes) {
  std::vector<std::vector<int>> levels;
  int block = 1;
  for (int s : sizes) {
    block *= s;
    std::vector<int> g(nranks);
    for (int r = 0; r < nranks; ++r) g[r] = r / block;
    levels.push_back(g);
  }
  return levels;
}

void checkExact(int nranks, size_t count, bool inPlace, const std::function<void(int, algo::Schedule*)>& build) {
  INFO("nranks " << nranks << " count " << count << " inPlace " << inPlace);
  auto res = test::runSymbolic(nranks, count, count, inPlace, build);
  REQUIRE(res.ok);
  for (size_t i = 0; i < count; ++i) {
    uint64_t expect = 0;
    for (int r = 0; r < nranks; ++r) expect += test::symbolicKey(r, i);
    for (int r = 0; r < nranks; ++r)
      if (res.output[r][i] != expect) FAIL("rank " << r << " element " << i << " wrong");
  }
}

void checkHier(int nranks, const std::vector<int>& sizes, size_t count, algo::GroupAlgo inner, algo::FlatAllReduce outer,
               bool inPlace) {
  INFO("inner " << int(inner) << " outer " << int(outer) << " levels " << sizes.size());
  const algo::HierarchicalSpec spec{blockLevels(nranks, sizes), inner, outer};
  REQUIRE(algo::HierarchicalAllReduce::check(nranks, spec.groupOf).empty());
  checkExact(nranks, count, inPlace, [&](int rank, algo::Schedule* s) {
    algo::HierarchicalAllReduce::build(rank, nranks, spec, count, 3, s);
  });
}

}  // namespace

TEST_CASE("hierarchical all-reduce is exact for every inner and outer algorithm", "[schedule][hier]") {
  // (group sizes per level, ranks): the ranks divide into the last level's groups.
  const std::vector<std::pair<std::vector<int>, int>> shapes = {
      {{2}, 4}, {{3}, 6}, {{2}, 6}, {{5}, 10}, {{2, 2}, 8}, {{2, 3}, 12}, {{4, 3}, 24}};
  for (const auto& [sizes, nranks] : shapes)
    for (size_t count : {size_t(0), size_t(1), size_t(5), size_t(nranks), size_t(97), size_t(1000)})
      for (auto inner : {algo::GroupAlgo::Ring, algo::GroupAlgo::Direct})
        for (auto outer : {algo::FlatAllReduce::Ring, algo::FlatAllReduce::Tree, algo::FlatAllReduce::HalvingDoubling,
                           algo::FlatAllReduce::Direct})
          for (bool inPlace : {false, true}) checkHier(nranks, sizes, count, inner, outer, inPlace);
}

TEST_CASE("hierarchical all-reduce is exact up to 1,024 ranks", "[schedule][hier]") {
  checkHier(64, {8}, 200, algo::GroupAlgo::Ring, algo::FlatAllReduce::Tree, false);
  checkHier(256, {16, 4}, 301, algo::GroupAlgo::Ring, algo::FlatAllReduce::HalvingDoubling, true);
  // The schedules are arithmetic with no memory of their own to get wrong at 1,024 ranks
  // that 256 would not show: sanitized builds stop at 256.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  checkHier(1024, {8}, 1030, algo::GroupAlgo::Ring, algo::FlatAllReduce::Ring, false);
  checkHier(1024, {4, 16}, 1030, algo::GroupAlgo::Ring, algo::FlatAllReduce::Tree, true);
#endif
}

TEST_CASE("halving-doubling all-reduce is exact at 1,000 and 1,024 ranks", "[schedule][hd]") {
  for (int n : {1000, 1024})
    checkExact(n, 1100, false, [&](int rank, algo::Schedule* s) { algo::HalvingDoublingAllReduce::build(rank, n, 1100, s); });
}

TEST_CASE("hierarchical levels that cannot carry the composition are refused", "[schedule][hier]") {
  CHECK(algo::HierarchicalAllReduce::check(6, {{0, 0, 0, 1, 1, 2}}) == "groups of a level differ in size");
  CHECK(algo::HierarchicalAllReduce::check(4, {{0, 0, 1, 1}, {0, 1, 0, 1}}) ==
        "groups of a level are not nested in the next level's");
  CHECK(algo::HierarchicalAllReduce::check(4, {{0, 0, 0, 0}}) == "a level with a single group");
  CHECK(algo::HierarchicalAllReduce::check(4, {{0, 0, 1, 1}}).empty());
}

TEST_CASE("hierarchical phases: left-over inside and across nodes, reduce-scatter, across, all-gather", "[schedule][hier]") {
  // 2 nodes of 4: 10 = 4*2 + 2 elements.
  const auto phases = algo::HierarchicalAllReduce::phases(8, blockLevels(8, {4}), 10);
  REQUIRE(phases.size() == 5);
  // The 2 left over: inside each node, then across them between the ranks of one place,
  // so that no rank sends them to every rank of the other node.
  CHECK(phases[0].tail);
  CHECK(phases[0].count == 2);
  CHECK(phases[0].base[0] == 8);
  CHECK(phases[0].groups == std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(phases[1].kind == algo::HierPhase::Kind::ReduceScatter);
  CHECK(phases[1].groups.size() == 2);
  CHECK(phases[2].tail);
  CHECK(phases[2].kind == algo::HierPhase::Kind::AllReduce);
  CHECK(!phases[2].fromInput);
  CHECK(phases[2].groups.size() == 4);
  CHECK(phases[2].groups[1] == std::vector<int>{1, 5});
  CHECK(phases[2].base[1] == 8);
  CHECK(phases[3].kind == algo::HierPhase::Kind::AllReduce);
  CHECK(!phases[3].tail);
  CHECK(phases[3].groups.size() == 4);  // block j of both nodes
  CHECK(phases[3].groups[1] == std::vector<int>{1, 5});
  CHECK(phases[3].base[1] == 2);
  CHECK(phases[4].kind == algo::HierPhase::Kind::AllGather);
}
