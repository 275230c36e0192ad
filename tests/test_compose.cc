// Composition of schedules: sub-group schedules remapped onto comm ranks, buffer regions and
// tag ranges, appended as phases. Checked on a hierarchical All-Reduce built from the tree,
// halving-doubling and direct schedules, run symbolically.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "algorithms/compose.h"
#include "algorithms/direct.h"
#include "algorithms/halving_doubling.h"
#include "algorithms/tree.h"
#include "tests/util/schedule_check.h"

using namespace sncl;

namespace {

constexpr size_t kScratchOffset = 5;  // the inner All-Reduce's scratch does not start at 0

// A 2-rank all-gather of the halves [0, half) (local rank 0) and [half, count) (local rank 1).
void exchangeHalves(int localRank, size_t count, algo::Schedule* part) {
  part->clear();
  const size_t half = count - count / 2;
  const size_t ownBegin = localRank == 0 ? 0 : half, ownCount = localRank == 0 ? half : count - half;
  const size_t otherBegin = localRank == 0 ? half : 0, otherCount = count - ownCount;
  const int peer = 1 - localRank;
  if (ownCount) part->add({algo::OpKind::Send, algo::Buf::Output, algo::Buf::Output, peer, 0, ownBegin, ownBegin, ownCount});
  if (otherCount)
    part->add({algo::OpKind::Recv, algo::Buf::Output, algo::Buf::Output, peer, 0, otherBegin, otherBegin, otherCount});
  part->endStep();
}

// Hierarchical All-Reduce over `nodes` nodes of two ranks (2i, 2i+1):
//   phase 0: All-Reduce inside each node (direct or halving-doubling), Input -> Output;
//   phase 1: tree All-Reduce across nodes, in place in Output: the even ranks on the first
//            half of the buffer, the odd ranks (listed in reverse) on the second half;
//   phase 2: inside each node, each rank sends its half to the other.
void buildHierarchical(int rank, int nodes, size_t count, bool directInside, algo::Schedule* out) {
  out->clear();
  const size_t half = count - count / 2;
  algo::Placement node;
  node.members = {rank / 2 * 2, rank / 2 * 2 + 1};
  node.scratchOffset = kScratchOffset;
  algo::appendGroupPhase(rank, node, [&](int localRank, int localNranks, algo::Schedule* part) {
    if (directInside) algo::DirectAllReduce::build(localRank, localNranks, count, part);
    else algo::HalvingDoublingAllReduce::build(localRank, localNranks, count, part);
  }, out);

  for (int side = 0; side < 2; ++side) {
    algo::Placement across;
    for (int i = 0; i < nodes; ++i) across.members.push_back(side == 0 ? 2 * i : 2 * (nodes - 1 - i) + 1);
    const size_t offset = side == 0 ? 0 : half, n = side == 0 ? half : count - half;
    across.input = across.output = {algo::Buf::Output, offset};
    across.phase = 1;
    algo::appendGroupPhase(rank, across, [&](int localRank, int localNranks, algo::Schedule* part) {
      algo::TreeAllReduce::build(localRank, localNranks, n, 3, part);
    }, out);
  }

  node.input = node.output = {algo::Buf::Output, 0};
  node.phase = 2;
  algo::appendGroupPhase(rank, node, [&](int localRank, int, algo::Schedule* part) {
    exchangeHalves(localRank, count, part);
  }, out);
}

}  // namespace

TEST_CASE("composed hierarchical all-reduce is exact", "[schedule][compose]") {
  for (int nodes = 1; nodes <= 6; ++nodes) {
    const int nranks = 2 * nodes;
    for (size_t count : {size_t(0), size_t(1), size_t(2), size_t(7), size_t(nranks), size_t(100), size_t(1001)}) {
      for (bool directInside : {true, false}) {
        for (bool inPlace : {false, true}) {
          INFO("nodes " << nodes << " count " << count << " direct " << directInside << " inPlace " << inPlace);
          auto res = test::runSymbolic(nranks, count, count, inPlace, [&](int rank, algo::Schedule* s) {
            buildHierarchical(rank, nodes, count, directInside, s);
          });
          REQUIRE(res.ok);
          for (size_t i = 0; i < count; ++i) {
            uint64_t expect = 0;
            for (int r = 0; r < nranks; ++r) expect += test::symbolicKey(r, i);
            for (int r = 0; r < nranks; ++r)
              if (res.output[r][i] != expect) FAIL("rank " << r << " element " << i << " wrong");
          }
        }
      }
    }
  }
}

TEST_CASE("composed phases keep to their tag ranges and scratch", "[schedule][compose]") {
  const size_t count = 100;
  algo::Schedule s;
  for (int rank = 0; rank < 8; ++rank) {
    buildHierarchical(rank, 4, count, true, &s);
    uint32_t phase = 0;
    for (const algo::Op& op : s.ops) {
      if (op.peer < 0) continue;
      const uint32_t opPhase = op.tag >> algo::kPhaseTagBits;
      CHECK(opPhase >= phase);  // phases follow each other, never interleave
      CHECK(opPhase <= 2);
      phase = opPhase;
      if (opPhase == 0) CHECK((op.peer ^ 1) == rank);      // inside the node
      if (opPhase == 1) CHECK((op.peer & 1) == (rank & 1));  // across nodes, same side
    }
    CHECK(phase == 2);
    CHECK(s.scratchCount == kScratchOffset + count);  // the direct All-Reduce's scratch, shifted
  }
}

TEST_CASE("appendPhase remaps peers, buffers, offsets and tags", "[schedule][compose]") {
  algo::Schedule part;
  part.add({algo::OpKind::Send, algo::Buf::Input, algo::Buf::Input, 1, 7, 2, 2, 4});
  part.add({algo::OpKind::RecvReduce, algo::Buf::Input, algo::Buf::Output, 1, (1u << algo::kPhaseTagBits) + 9, 0, 1, 2});
  part.endStep();
  part.add({algo::OpKind::Copy, algo::Buf::Scratch, algo::Buf::Output, -1, 0, 3, 0, 6});
  part.endStep();
  part.scratchCount = 9;

  algo::Schedule out;
  out.add({algo::OpKind::Copy, algo::Buf::Input, algo::Buf::Output, -1, 0, 0, 0, 1});  // left open
  algo::Placement p;
  p.members = {7, 3};
  p.input = {algo::Buf::Output, 100};
  p.output = {algo::Buf::Output, 200};
  p.scratchOffset = 40;
  p.phase = 3;
  algo::appendPhase(part, p, &out);

  REQUIRE(out.numSteps() == 3);  // the open op became a step of its own
  REQUIRE(out.ops.size() == 4);
  const algo::Op& send = out.ops[1];
  CHECK(send.peer == 3);
  CHECK(send.srcBuf == algo::Buf::Output);
  CHECK(send.src == 102);
  CHECK(send.tag == algo::phaseTagBase(3) + 7);
  const algo::Op& fold = out.ops[2];
  CHECK(fold.src == 100);
  CHECK(fold.dst == 201);
  CHECK(fold.tag == algo::phaseTagBase(3) + 9);  // folded into the phase's range
  const algo::Op& copy = out.ops[3];
  CHECK(copy.peer == -1);
  CHECK(copy.srcBuf == algo::Buf::Scratch);
  CHECK(copy.src == 43);
  CHECK(copy.dst == 200);
  CHECK(out.scratchCount == 49);
  CHECK(out.stepEnd == std::vector<uint32_t>{1, 3, 4});
}

TEST_CASE("appendGroupPhase skips ranks outside the group", "[schedule][compose]") {
  algo::Placement p;
  p.members = {4, 1, 6};
  CHECK(algo::localRankOf(p.members, 6) == 2);
  CHECK(algo::localRankOf(p.members, 0) == -1);
  algo::Schedule out;
  auto build = [](int localRank, int localNranks, algo::Schedule* part) {
    algo::TreeAllReduce::build(localRank, localNranks, 10, 2, part);
  };
  CHECK_FALSE(algo::appendGroupPhase(0, p, build, &out));
  CHECK(out.numSteps() == 0);
  CHECK(algo::appendGroupPhase(1, p, build, &out));
  CHECK(out.numSteps() > 0);
  for (const algo::Op& op : out.ops) CHECK((op.peer == 4 || op.peer == 6));
}

TEST_CASE("a phase numbered differently on two ranks is caught by its tags", "[schedule][compose]") {
  auto res = test::runSymbolic(2, 10, 10, false, [](int rank, algo::Schedule* s) {
    s->clear();
    algo::Placement p;
    p.members = {0, 1};
    p.phase = rank == 0 ? 1 : 2;
    algo::appendGroupPhase(rank, p, [](int localRank, int localNranks, algo::Schedule* part) {
      algo::HalvingDoublingAllReduce::build(localRank, localNranks, 10, part);
    }, s);
  });
  CHECK_FALSE(res.ok);
  CHECK(res.error.find("tag") != std::string::npos);
}
