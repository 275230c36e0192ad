// Schedules of the collectives other than All-Reduce, checked symbolically without
// processes (tests/util/schedule_check): every element lands where the collective says,
// reduced exactly once from every rank; no rank touches a buffer it must not (a
// non-root's output of a reduce may be NULL); no step writes what it also reads.
#include <catch2/catch.hpp>

#include <functional>

#include "algorithms/chain.h"
#include "algorithms/direct.h"
#include "algorithms/p2p.h"
#include "algorithms/ring.h"
#include "tests/util/schedule_check.h"

using namespace sncl;
using test::symbolicKey;

namespace {

const int kRankCounts[] = {1, 2, 3, 4, 5, 7, 8, 13, 16, 33};
const size_t kChunks[] = {1, 3, 64};

size_t countsOf(int n, size_t k) {
  const size_t counts[] = {0, 1, 7, static_cast<size_t>(n), 100};
  return counts[k];
}

using Build = std::function<void(int rank, algo::Schedule*)>;
using Expect = std::function<uint64_t(int rank, size_t i)>;

// Runs the schedules and compares every rank's output[0..outCount(rank)) with expect.
void check(int nranks, const std::function<size_t(int)>& inCount, const std::function<size_t(int)>& outCount,
           bool inPlace, const Build& build, const Expect& expect) {
  auto res = test::runSymbolic(nranks, inCount, outCount, inPlace, build);
  INFO("nranks " << nranks << " inPlace " << inPlace);
  if (!res.ok) FAIL(res.error);
  for (int r = 0; r < nranks; ++r)
    for (size_t i = 0; i < outCount(r); ++i)
      if (res.output[r][i] != expect(r, i)) FAIL("rank " << r << " element " << i << " wrong");
}

uint64_t sumOver(int nranks, size_t i) {
  uint64_t s = 0;
  for (int r = 0; r < nranks; ++r) s += symbolicKey(r, i);
  return s;
}

}  // namespace

TEST_CASE("broadcast schedules deliver root's data", "[schedule][broadcast]") {
  for (int n : kRankCounts) {
    for (size_t k = 0; k < 5; ++k) {
      const size_t count = countsOf(n, k);
      for (int root : {0, n - 1, n / 2}) {
        auto in = [&](int r) { return r == root ? count : 0; };
        auto out = [&](int) { return count; };
        auto expect = [&](int, size_t i) { return symbolicKey(root, i); };
        INFO("count " << count << " root " << root);
        for (size_t chunk : kChunks) {
          INFO("chain chunk " << chunk);
          check(n, in, out, false, [&](int r, algo::Schedule* s) { algo::ChainBroadcast::build(r, n, root, count, chunk, s); }, expect);
        }
        check(n, in, out, false, [&](int r, algo::Schedule* s) { algo::DirectBroadcast::build(r, n, root, count, s); }, expect);
        // In place: root's input is its output.
        auto same = [&](int) { return count; };
        check(n, same, same, true, [&](int r, algo::Schedule* s) { algo::ChainBroadcast::build(r, n, root, count, 3, s); }, expect);
        check(n, same, same, true, [&](int r, algo::Schedule* s) { algo::DirectBroadcast::build(r, n, root, count, s); }, expect);
      }
    }
  }
}

TEST_CASE("reduce schedules sum at root and leave the others' outputs alone", "[schedule][reduce]") {
  for (int n : kRankCounts) {
    for (size_t k = 0; k < 5; ++k) {
      const size_t count = countsOf(n, k);
      for (int root : {0, n - 1, n / 2}) {
        auto in = [&](int) { return count; };
        auto out = [&](int r) { return r == root ? count : 0; };
        auto expect = [&](int, size_t i) { return sumOver(n, i); };
        INFO("count " << count << " root " << root);
        for (size_t chunk : kChunks) {
          INFO("chain chunk " << chunk);
          check(n, in, out, false, [&](int r, algo::Schedule* s) { algo::ChainReduce::build(r, n, root, count, chunk, s); }, expect);
          check(n, in, in, true, [&](int r, algo::Schedule* s) { algo::ChainReduce::build(r, n, root, count, chunk, s); },
                [&](int r, size_t i) { return r == root ? sumOver(n, i) : symbolicKey(r, i); });
        }
        check(n, in, out, false, [&](int r, algo::Schedule* s) { algo::DirectReduce::build(r, n, root, count, s); }, expect);
        check(n, in, in, true, [&](int r, algo::Schedule* s) { algo::DirectReduce::build(r, n, root, count, s); },
              [&](int r, size_t i) { return r == root ? sumOver(n, i) : symbolicKey(r, i); });
      }
    }
  }
}

TEST_CASE("all-gather schedules place every rank's block", "[schedule][allgather]") {
  for (int n : kRankCounts) {
    for (size_t k = 0; k < 5; ++k) {
      const size_t count = countsOf(n, k), total = count * static_cast<size_t>(n);
      auto in = [&](int) { return count; };
      auto out = [&](int) { return total; };
      auto expect = [&](int, size_t i) { return symbolicKey(static_cast<int>(i / count), i % count); };
      INFO("count " << count);
      for (size_t chunk : kChunks) {
        INFO("ring chunk " << chunk);
        check(n, in, out, false, [&](int r, algo::Schedule* s) { algo::RingAllGather::build(r, n, count, chunk, s); }, expect);
      }
      check(n, in, out, false, [&](int r, algo::Schedule* s) { algo::DirectAllGather::build(r, n, count, s); }, expect);
    }
  }
}

TEST_CASE("reduce-scatter schedules give each rank its block's sum", "[schedule][reducescatter]") {
  for (int n : kRankCounts) {
    for (size_t k = 0; k < 5; ++k) {
      const size_t count = countsOf(n, k), total = count * static_cast<size_t>(n);
      auto in = [&](int) { return total; };
      auto out = [&](int) { return count; };
      auto expect = [&](int r, size_t i) { return sumOver(n, static_cast<size_t>(r) * count + i); };
      INFO("count " << count);
      for (size_t chunk : kChunks) {
        INFO("ring chunk " << chunk);
        check(n, in, out, false, [&](int r, algo::Schedule* s) { algo::RingReduceScatter::build(r, n, count, chunk, s); }, expect);
      }
      check(n, in, out, false, [&](int r, algo::Schedule* s) { algo::DirectReduceScatter::build(r, n, count, s); }, expect);
    }
  }
}

TEST_CASE("all-to-all, gather and scatter schedules move every block", "[schedule][direct]") {
  for (int n : kRankCounts) {
    for (size_t k = 0; k < 5; ++k) {
      const size_t count = countsOf(n, k), total = count * static_cast<size_t>(n);
      INFO("count " << count);
      auto all = [&](int) { return total; };
      auto one = [&](int) { return count; };
      for (bool inPlace : {false, true})
        check(n, all, all, inPlace, [&](int r, algo::Schedule* s) { algo::DirectAlltoAll::build(r, n, count, inPlace, s); },
              [&](int r, size_t i) { return symbolicKey(static_cast<int>(i / count), static_cast<size_t>(r) * count + i % count); });
      for (int root : {0, n - 1}) {
        INFO("root " << root);
        check(n, one, [&](int r) { return r == root ? total : 0; }, false,
              [&](int r, algo::Schedule* s) { algo::DirectGather::build(r, n, root, count, s); },
              [&](int, size_t i) { return symbolicKey(static_cast<int>(i / count), i % count); });
        check(n, [&](int r) { return r == root ? total : 0; }, one, false,
              [&](int r, algo::Schedule* s) { algo::DirectScatter::build(r, n, root, count, s); },
              [&](int r, size_t i) { return symbolicKey(root, static_cast<size_t>(r) * count + i); });
      }
    }
  }
}

TEST_CASE("chain schedules pipeline: chunks + n - 2 steps, one chunk per link per step", "[schedule][chain]") {
  algo::Schedule s;
  algo::ChainBroadcast::build(3, 8, 0, 10 * 4, 4, &s);  // position 3 of 8, 10 chunks
  CHECK(s.numSteps() == 10 + 1);  // receives chunks at steps 2..11, sends them at 3..12
  algo::ChainBroadcast::build(0, 8, 0, 10 * 4, 4, &s);
  CHECK(s.numSteps() == 10);
  algo::ChainReduce::build(1, 4, 0, 9, 3, &s);  // middle rank: two chunk slots of scratch
  CHECK(s.scratchCount == 6);
  algo::ChainReduce::build(0, 4, 0, 9, 3, &s);
  CHECK(s.scratchCount == 0);
}

TEST_CASE("point-to-point groups are one step; self messages pair up in order", "[schedule][p2p]") {
  algo::P2pState state;
  algo::Schedule s;
  size_t bad = 99;
  algo::P2pOp ops[] = {{true, 1, 8}, {false, 2, 16}, {true, 0, 4}, {true, 1, 0}, {false, 0, 4}};
  REQUIRE(algo::PointToPoint::build(0, 3, ops, 5, false, &state, &s, &bad) == algo::P2pStatus::Ok);
  REQUIRE(s.numSteps() == 1);
  REQUIRE(s.ops.size() == 4);
  CHECK(s.ops[0].kind == algo::OpKind::Copy);  // op 2 -> op 4
  CHECK(s.ops[0].srcBuf == algo::userBuf(2));
  CHECK(s.ops[0].dstBuf == algo::userBuf(4));
  CHECK((s.ops[1].tag == 0 && s.ops[3].tag == 1));  // two sends to rank 1 count up
  CHECK((s.ops[1].peer == 1 && s.ops[2].peer == 2 && s.ops[2].kind == algo::OpKind::Recv));
  // Tags continue in the next group.
  REQUIRE(algo::PointToPoint::build(0, 3, ops, 2, false, &state, &s, &bad) == algo::P2pStatus::Ok);
  CHECK(s.ops[0].tag == 2);
  CHECK(s.ops[1].tag == 1);

  algo::P2pOp unmatched[] = {{true, 1, 8}, {true, 0, 4}};
  CHECK(algo::PointToPoint::build(0, 3, unmatched, 2, false, &state, &s, &bad) == algo::P2pStatus::SelfSendUnmatched);
  CHECK(bad == 1);
  algo::P2pOp sizes[] = {{false, 0, 8}, {true, 0, 4}};
  CHECK(algo::PointToPoint::build(0, 3, sizes, 2, false, &state, &s, &bad) == algo::P2pStatus::SelfSizeMismatch);
  REQUIRE(algo::PointToPoint::build(0, 3, ops, 1, false, &state, &s, &bad) == algo::P2pStatus::Ok);
  CHECK(s.ops[0].tag == 3);  // failed builds left the counters alone
}

TEST_CASE("acked point-to-point groups answer every message; the rest of a group is what peers lack",
          "[schedule][p2p]") {
  algo::P2pState state;
  algo::Schedule s;
  size_t bad = 0;
  // Rank 1 of 3: two sends to rank 2, a receive from rank 0, a message to itself.
  algo::P2pOp ops[] = {{true, 2, 8}, {false, 0, 16}, {true, 2, 4}, {true, 1, 4}, {false, 1, 4}};
  REQUIRE(algo::PointToPoint::build(1, 3, ops, 5, true, &state, &s, &bad) == algo::P2pStatus::Ok);
  REQUIRE(s.numSteps() == 2);
  REQUIRE(s.stepEnd[0] == 4);  // the copy and three messages
  REQUIRE(s.ops.size() == 7);  // and an ack for each message
  for (uint32_t i = s.stepEnd[0]; i < s.ops.size(); ++i) {
    const algo::Op& ack = s.ops[i];
    const algo::Op& data = s.ops[i - 3];
    CHECK(ack.count == 0);
    CHECK(ack.peer == data.peer);
    CHECK(ack.tag == (data.tag | algo::kAckTag));
    CHECK(ack.kind == (data.kind == algo::OpKind::Send ? algo::OpKind::Recv : algo::OpKind::Send));
  }
  CHECK((ops[0].tag == 0 && ops[2].tag == 1 && ops[1].tag == 0));
  // Rank 2 has the first message of this rank; this rank still lacks rank 0's.
  const uint32_t sendFrom[] = {0, 0, 1}, recvFrom[] = {0, 0, 0};
  algo::PointToPoint::buildRemaining(1, ops, 5, sendFrom, recvFrom, true, &s);
  REQUIRE(s.numSteps() == 2);
  REQUIRE(s.stepEnd[0] == 3);  // the copy again, the second send, the receive
  CHECK(s.ops[0].kind == algo::OpKind::Copy);
  CHECK((s.ops[1].kind == algo::OpKind::Recv && s.ops[1].peer == 0));
  CHECK((s.ops[2].kind == algo::OpKind::Send && s.ops[2].tag == 1));
  CHECK(s.ops.size() == 5);
  // Nothing left but the copy: no acks, one step.
  const uint32_t allSent[] = {0, 0, 2}, allReceived[] = {1, 0, 0};
  algo::PointToPoint::buildRemaining(1, ops, 5, allSent, allReceived, true, &s);
  CHECK(s.numSteps() == 1);
  CHECK(s.ops.size() == 1);
}
