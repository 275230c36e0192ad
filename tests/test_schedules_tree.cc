// Double binary tree All-Reduce schedules checked symbolically, no processes: every element
// reduced exactly once from every rank and delivered to every rank; the trees' shape; the
// pipeline's length; the cost estimate.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <vector>

#include "algorithms/tree.h"
#include "tests/util/schedule_check.h"

using namespace sncl;

namespace {

// The ops of a step run concurrently (the symbolic run does them one by one): none may write
// memory that another op of the step reads or writes. Input counts as Output (in place).
bool stepsIndependent(const algo::Schedule& s) {
  struct Access {
    size_t op;
    algo::Buf buf;
    size_t begin, end;
    bool write;
  };
  auto buf = [](algo::Buf b) { return b == algo::Buf::Input ? algo::Buf::Output : b; };
  for (size_t step = 0; step < s.numSteps(); ++step) {
    std::vector<Access> accesses;
    for (size_t i = s.stepBegin(step); i < s.stepEnd[step]; ++i) {
      const algo::Op& op = s.ops[i];
      if (op.kind != algo::OpKind::Recv) accesses.push_back({i, buf(op.srcBuf), op.src, op.src + op.count, false});
      if (op.kind != algo::OpKind::Send) accesses.push_back({i, buf(op.dstBuf), op.dst, op.dst + op.count, true});
    }
    for (const Access& a : accesses)
      for (const Access& b : accesses)
        if (a.op != b.op && a.write && a.buf == b.buf && a.begin < b.end && b.begin < a.end) return false;
  }
  return true;
}

void checkTree(int nranks, size_t count, size_t chunk, bool inPlace) {
  INFO("nranks " << nranks << " count " << count << " chunk " << chunk << " inPlace " << inPlace);
  auto res = test::runSymbolic(nranks, count, count, inPlace, [&](int rank, algo::Schedule* s) {
    algo::TreeAllReduce::build(rank, nranks, count, chunk, s);
    if (!stepsIndependent(*s)) FAIL("rank " << rank << ": ops of a step overlap");
  });
  REQUIRE(res.ok);
  for (size_t i = 0; i < count; ++i) {
    uint64_t expect = 0;
    for (int r = 0; r < nranks; ++r) expect += test::symbolicKey(r, i);
    for (int r = 0; r < nranks; ++r)
      if (res.output[r][i] != expect) FAIL("rank " << r << " element " << i << " wrong");
  }
}

int ceilLog2(int n) { return std::bit_width(static_cast<unsigned>(n - 1)); }

// Steps on the shared clock that the whole schedule spans (tags are 2 * step + tree).
size_t clockSteps(int nranks, size_t count, size_t chunk) {
  size_t steps = 0;
  algo::Schedule s;
  for (int r = 0; r < nranks; ++r) {
    algo::TreeAllReduce::build(r, nranks, count, chunk, &s);
    for (const algo::Op& op : s.ops)
      if (op.peer >= 0) steps = std::max<size_t>(steps, op.tag / 2 + 1);
  }
  return steps;
}

// Checks tree's links and timing over nranks; returns which ranks are interior nodes.
std::vector<bool> checkTreeShape(int tree, int n) {
  INFO("tree " << tree << " nranks " << n);
  std::vector<algo::TreeNode> nodes(n);
  for (int r = 0; r < n; ++r) nodes[r] = algo::DoubleBinaryTree::node(tree, r, n);
  std::vector<bool> interior(n, false);
  int roots = 0, maxDepth = 0;
  bool linked = true, timed = true, acyclic = true;
  for (int r = 0; r < n; ++r) {
    const algo::TreeNode& node = nodes[r];
    roots += node.parent < 0;
    for (int i = 0; i < 2 && node.children[i] >= 0; ++i) {
      const algo::TreeNode& child = nodes[node.children[i]];
      interior[r] = true;
      linked &= child.parent == r;
      timed &= node.foldTime[i] == child.upTime && child.upTime < node.upTime && child.downTime == node.downTime + 1;
    }
    timed &= node.children[1] < 0 || node.foldTime[0] < node.foldTime[1];  // one fold per step
    int depth = 0;
    for (int v = r; nodes[v].parent >= 0 && acyclic; v = nodes[v].parent) acyclic = ++depth < n;
    maxDepth = std::max(maxDepth, depth);
  }
  CHECK(roots == 1);
  CHECK(linked);
  CHECK(timed);
  CHECK(acyclic);
  CHECK(maxDepth == ceilLog2(n));
  return interior;
}

}  // namespace

TEST_CASE("tree all-reduce schedule is exact for 1..17 ranks", "[schedule][tree]") {
  for (int n = 1; n <= 17; ++n) {
    const size_t counts[] = {0, 1, 2, 7, size_t(n - 1), size_t(n), size_t(3 * n + 1), 2 * 5 * 4 + 3};
    for (size_t count : counts) {
      for (size_t chunk : {size_t(1), size_t(4), size_t(64)}) {
        checkTree(n, count, chunk, false);
        checkTree(n, count, chunk, true);
      }
    }
  }
}

TEST_CASE("tree all-reduce schedule is exact for larger rank counts", "[schedule][tree]") {
  for (int n : {31, 32, 33, 63, 64, 100, 127, 128, 255, 256, 257}) {
    checkTree(n, 3 * n + 1, 16, false);
    checkTree(n, 37, 5, true);
  }
  checkTree(1000, 120, 16, true);
  checkTree(1024, 130, 16, false);  // 5 chunks in tree 0, 4 in tree 1
}

TEST_CASE("the two trees span all ranks, are shallow and complementary", "[schedule][tree]") {
  std::vector<int> sizes;
  for (int n = 1; n <= 130; ++n) sizes.push_back(n);
  for (int n : {255, 256, 257, 511, 512, 513, 1000, 1023, 1024}) sizes.push_back(n);
  for (int n : sizes) {
    const std::vector<bool> interior0 = checkTreeShape(0, n), interior1 = checkTreeShape(1, n);
    // Tree 0's leaves are tree 1's interior nodes: no rank but 0 forwards in both trees.
    int both = 0;
    for (int r = 1; r < n; ++r) both += interior0[r] && interior1[r];
    INFO("nranks " << n);
    CHECK(both == 0);
  }
}

TEST_CASE("tree pipeline: 3 log2 n - 2 steps of latency, then one step per chunk", "[schedule][tree]") {
  for (int n : {2, 3, 5, 8, 12, 16, 17, 64, 100, 128}) {
    INFO("nranks " << n);
    for (size_t chunks : {size_t(1), size_t(2), size_t(7)}) {
      const size_t count = 2 * chunks * 4;  // chunks of 4 in each tree
      const size_t steps = clockSteps(n, count, 4);
      CHECK(steps <= algo::TreeAllReduce::stepBound(n, count, 4));
      if (std::has_single_bit(static_cast<unsigned>(n))) CHECK(steps == chunks + 3 * ceilLog2(n) - 2);
      CHECK(steps == clockSteps(n, 2 * 4, 4) + chunks - 1);
      algo::Schedule s;
      for (int r = 0; r < n; ++r) {
        algo::TreeAllReduce::build(r, n, count, 4, &s);
        CHECK(s.numSteps() <= steps);
      }
    }
  }
}

TEST_CASE("tree moves each chunk once up and once down every edge", "[schedule][tree]") {
  for (int n : {2, 7, 16, 33}) {
    const size_t count = 2 * 3 * 8 - 1;  // tree 0: 24 elements, 3 chunks; tree 1: 23 in 3 chunks
    size_t sends = 0, sentElements = 0;
    algo::Schedule s;
    for (int r = 0; r < n; ++r) {
      algo::TreeAllReduce::build(r, n, count, 8, &s);
      for (const algo::Op& op : s.ops) {
        if (op.kind != algo::OpKind::Send) continue;
        ++sends;
        sentElements += op.count;
      }
    }
    CHECK(sends == 2 * size_t(n - 1) * 6);
    CHECK(sentElements == 2 * size_t(n - 1) * count);
  }
}

TEST_CASE("tree cost estimate matches the formula by hand", "[schedule][tree]") {
  // 8 ranks, 1 MiB, 64 KiB chunks: k = 8 chunks per tree, d = 3, 8 + 9 - 2 = 15 steps, each
  // 2 + 4 * 65536 / 1e4 + 2 * 65536 / 2e4 = 34.768 us.
  CHECK(algo::TreeAllReduce::estimateUs(8, 1 << 20, 2.0, 10.0, 20.0, 64 << 10) == Approx(15 * 34.768));
  CHECK(algo::TreeAllReduce::estimateUs(1, 1 << 20, 2.0, 10.0, 20.0, 64 << 10) == Approx(1048576 / 2e4));
  CHECK(algo::TreeAllReduce::estimateUs(8, 0, 2.0, 10.0, 20.0, 64 << 10) == 0.0);
}
