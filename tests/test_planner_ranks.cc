// Every All-Reduce algorithm the planner can choose, forced on real ranks (threads of
// snclCommInitAll) for 1..17 ranks: ring, direct (mesh), tree, halving-doubling, and the
// hierarchical compositions over a two- and a three-level topology where the rank count
// splits into equal groups. float32 and int32 sums, in and out of place, counts that
// do not divide into the groups (so the left-over phase runs).
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "lib/comm/comm.h"
#include "lib/topo/generators.h"
#include "sncl/sncl_ext.h"
#include "tests/util/data.h"

using namespace sncl;

namespace {

// A graph whose levels group nranks = a*b*c ranks: c supernodes of b nodes of a ranks.
std::shared_ptr<CostModel> levelsModel(int a, int b, int c) {
  topo::ClusterParams p;
  p.supernodes = c;
  topo::FullMeshParams mesh;
  mesh.endpoints = a * b;
  mesh.perNode = a;
  p.supernode = mesh;
  auto g = std::make_shared<topo::Graph>();
  REQUIRE(topo::generate(*g, p) == snclSuccess);
  REQUIRE(g->finalize() == snclSuccess);
  REQUIRE(g->mapRanks(a * b * c) == snclSuccess);
  std::vector<topo::VertexId> rv;
  for (int r = 0; r < a * b * c; ++r) rv.push_back(g->rankVertex(r));
  return std::make_shared<CostModel>(g, rv, defaultTuning());
}

// The smallest factor >= 2 of n (n itself when prime).
int smallestFactor(int n) {
  for (int f = 2; f * f <= n; ++f)
    if (n % f == 0) return f;
  return n;
}

int runAllReduces(snclComm_t comm, int rank, int nranks, const char* what) {
  int failures = 0;
  for (size_t count : {size_t(1), size_t(13), size_t(4099)}) {
    std::vector<char> in(count * 4 + 4), out(count * 4 + 4);
    for (snclDataType_t type : {snclFloat32, snclInt32}) {
      for (bool inPlace : {false, true}) {
        test::fillInput(type, snclSum, rank, nranks, in.data(), count);
        void* recv = inPlace ? in.data() : out.data();
        snclResult_t r = snclAllReduce(in.data(), recv, count, type, snclSum, comm, nullptr);
        size_t wrong = r == snclSuccess ? test::countWrong(type, snclSum, nranks, recv, count) : count;
        if (r != snclSuccess || wrong) {
          fprintf(stderr, "%s rank %d/%d count %zu type %d inPlace %d: result %d, %zu wrong: %s\n", what, rank, nranks, count,
                  type, inPlace, r, wrong, snclGetLastError(comm));
          ++failures;
        }
      }
    }
  }
  return failures;
}

// Runs every plan of `plans` on all ranks; each rank's planner is replaced by one on model.
void runPlans(int nranks, std::shared_ptr<CostModel> model, const std::vector<Plan>& plans) {
  std::vector<snclComm_t> comms(nranks);
  REQUIRE(snclCommInitAll(comms.data(), nranks, nullptr) == snclSuccess);
  PlannerOptions options;
  options.chunkBytes = 1024;  // several pipeline chunks even at these counts
  for (int r = 0; r < nranks; ++r) comms[r]->planner = std::make_unique<Planner>(r, model, options);
  for (const Plan& plan : plans) {
    const std::string what = comms[0]->planner->describe(plan);
    INFO("nranks " << nranks << " plan " << what);
    std::vector<int> failures(nranks, 0);
    std::vector<std::thread> threads;
    for (int r = 0; r < nranks; ++r) {
      comms[r]->planner->force(plan);
      threads.emplace_back([&, r] { failures[r] = runAllReduces(comms[r], r, nranks, what.c_str()); });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < nranks; ++r) CHECK(failures[r] == 0);
  }
  for (auto c : comms) CHECK(snclCommDestroy(c) == snclSuccess);
}

}  // namespace

TEST_CASE("every flat all-reduce algorithm is exact on 1..17 ranks", "[planner][threads]") {
  for (int n = 1; n <= 17; ++n) {
    std::vector<Plan> plans;
    for (Algorithm a : {Algorithm::Ring, Algorithm::Direct, Algorithm::Tree, Algorithm::HalvingDoubling})
      plans.push_back({.coll = CollType::AllReduce, .algorithm = a});
    runPlans(n, levelsModel(1, n, 1), plans);
  }
}

TEST_CASE("hierarchical all-reduce is exact on two and three levels", "[planner][threads]") {
  for (int n = 4; n <= 17; ++n) {
    const int a = smallestFactor(n);
    if (a == n) continue;  // primes have no equal groups
    const int rest = n / a, b = smallestFactor(rest), c = rest / b;
    // Three levels when n has three factors (8 = 2x2x2, 12 = 2x2x3), else two (nodes of a).
    auto model = c > 1 ? levelsModel(a, b, c) : levelsModel(a, 1, rest);
    Planner probe(0, model, {});
    REQUIRE(!probe.hierarchies().empty());
    if (c > 1) CHECK(probe.hierarchies().size() == 3);  // node, supernode, node+supernode
    std::vector<Plan> plans;
    for (size_t h = 0; h < probe.hierarchies().size(); ++h)
      for (auto inner : {algo::GroupAlgo::Ring, algo::GroupAlgo::Direct})
        for (auto outer : {algo::FlatAllReduce::Ring, algo::FlatAllReduce::Tree, algo::FlatAllReduce::HalvingDoubling,
                           algo::FlatAllReduce::Direct}) {
          // Every outer algorithm with ring inside, and direct inside once.
          if (inner == algo::GroupAlgo::Direct && outer != algo::FlatAllReduce::Tree) continue;
          plans.push_back({.coll = CollType::AllReduce, .algorithm = Algorithm::Hierarchical, .hierarchy = int(h),
                           .inner = inner, .outer = outer});
        }
    runPlans(n, model, plans);
  }
}

TEST_CASE("snclCommExplainPlan names the plan every rank runs, and refuses bad input", "[planner][threads]") {
  constexpr int kRanks = 4;
  std::vector<snclComm_t> comms(kRanks);
  REQUIRE(snclCommInitAll(comms.data(), kRanks, nullptr) == snclSuccess);
  char plan[128];
  double estimate = 0;
  for (size_t bytes : {size_t(8), size_t(1) << 22}) {
    REQUIRE(snclCommExplainPlan(comms[0], "allreduce", bytes, plan, sizeof plan, &estimate) == snclSuccess);
    CHECK(estimate > 0);
    const Plan& chosen = comms[0]->planner->choose(CollType::AllReduce, bytes);
    CHECK(std::string(plan) == comms[0]->planner->describe(chosen));
    for (int r = 1; r < kRanks; ++r) {
      char other[128];
      REQUIRE(snclCommExplainPlan(comms[r], "allreduce", bytes, other, sizeof other, nullptr) == snclSuccess);
      CHECK(std::string(other) == plan);
    }
  }
  REQUIRE(snclCommExplainPlan(comms[0], "allgather", 4096, plan, sizeof plan, nullptr) == snclSuccess);
  CHECK(strlen(plan) > 0);
  char tiny[4];  // truncated, still terminated
  REQUIRE(snclCommExplainPlan(comms[0], "allreduce", 8, tiny, sizeof tiny, nullptr) == snclSuccess);
  CHECK(strlen(tiny) == 3);
  CHECK(snclCommExplainPlan(comms[0], "allredux", 8, plan, sizeof plan, nullptr) == snclInvalidArgument);
  CHECK(std::string(snclGetLastError(comms[0])).find("unknown collective") != std::string::npos);
  CHECK(snclCommExplainPlan(comms[0], nullptr, 8, plan, sizeof plan, nullptr) == snclInvalidArgument);
  CHECK(snclCommExplainPlan(comms[0], "allreduce", 8, nullptr, 16, nullptr) == snclInvalidArgument);
  CHECK(snclCommExplainPlan(nullptr, "allreduce", 8, plan, sizeof plan, nullptr) != snclSuccess);
  for (auto c : comms) CHECK(snclCommDestroy(c) == snclSuccess);
}
